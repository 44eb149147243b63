"""`memtrain plan` and the OOM doctor end to end, on gpt2-tiny.

plan: the listed configurations are sorted by their own predicted time, each fits the device memory, and each
printed command line's flags give `memtrain estimate` exactly the listed per-rank bytes, those of its largest rank
(one process, and two ranks through --dp, or as pipeline stages); `memtrain train` parses them too (refused at
--memory-limit 1 after printing the same total).
OOM doctor: an oversize run is refused with exit 3 and changes that fit; the first change then trains a step with
measured == planned, within the limit.
--cpu-isa: plan at another level, on the profile shipped for it.
calibrate: a profile of positive rates, its level, threads and CPU, with MPI measured only under mpirun, that plan
reads.

Runs the binary memtrain_cli.py names.
"""
import json
import re
import shlex
import unittest

from memtrain_cli import CliTestCase, memtrain, read_json, read_memory, run_flags

FLAGS = ["--model", "gpt2-tiny", "--seq-length", "64", "--threads", "1"]


def with_change(args, change):
    """args with the change's flags: a flag it names loses its old value, the others are appended."""
    named = {word for word in change if word.startswith("--")}
    kept, skip_value = [], False
    for word in map(str, args):
        if skip_value and not word.startswith("--"):
            skip_value = False
            continue
        skip_value = word in named
        if not skip_value:
            kept.append(word)
    return kept + change


class PlanTest(CliTestCase):
    def refused_total(self, args):
        """The per-rank total the OOM doctor prints when refusing `args` at a 1-byte limit."""
        result = memtrain("train", *args, "--memory-limit", "1")
        self.assertEqual(result.returncode, 3, result.stderr)
        return int(re.search(r"^  total\s+(\d+)", result.stdout, re.M).group(1))

    def trains_within(self, args, limit, out):
        """`args` train a step at --memory-limit `limit`, measured == planned and within it."""
        fixed = memtrain("train", *args, "--memory-limit", limit)
        self.assertEqual(fixed.returncode, 0, fixed.stdout + fixed.stderr)
        memory = read_memory(out)
        self.assertEqual(memory["planned"], memory["measured"])
        self.assertLessEqual(sum(memory["planned"].values()), limit)

    def estimated_total(self, command):
        """The largest rank's total from `memtrain estimate` with a printed command line's flags (mpirun -np N:
        --dp N / (T x P) for --tensor-model-parallel-size T and --pipeline-model-parallel-size P)."""
        words = shlex.split(command)
        model_parallel = 1
        for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size"):
            model_parallel *= int(words[words.index(flag) + 1]) if flag in words else 1
        ranks = ["--dp", str(int(words[2]) // model_parallel)] if words[0] == "mpirun" else []
        args = words[words.index("train") + 1 :]
        result = memtrain("estimate", *args, *ranks, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        return max(rank["total_bytes"] for rank in json.loads(result.stdout)["ranks"])

    def test_plan_lists_fitting_configurations_in_predicted_order(self):
        limit = 5 << 20
        for ranks in (1, 2):
            result = memtrain("plan", *FLAGS, "--ranks", ranks, "--device-memory", f"{limit}B",
                              "--global-batch-size", 8, "--top", 20, "--data", self.data)
            self.assertEqual(result.returncode, 0, result.stderr)
            entries = re.findall(r"per rank \S+ \S+ = (\d+) B .*?, ([\d.]+) s/step\n\s+((?:mpirun|memtrain) .*)\n",
                                 result.stdout)
            self.assertGreaterEqual(len(entries), 3, result.stdout)
            steps = [float(step) for _, step, _ in entries]
            self.assertEqual(steps, sorted(steps))
            for planned, _, command in entries:
                self.assertLessEqual(int(planned), limit)
                self.assertEqual(self.estimated_total(command), int(planned), command)
            # Where the CPU multiplies bf16 itself; below avx512_bf16 its products are no faster than fp16's.
            native = re.search(r"per rank at (\w+)\n", result.stdout).group(1) == "avx512_bf16"
            self.assertIn("agrees: bf16 before fp16" if native else ": bf16 before fp16", result.stdout)
            if ranks == 1:
                # The OOM doctor's refusal at a 1-byte limit prints the same total: train parses them too.
                planned, _, command = entries[0]
                self.assertEqual(self.refused_total(shlex.split(command)[2:]), int(planned), command)

    def test_plan_searches_pipeline_stages(self):
        """On 2 ranks plan also lists 2 pipeline stages (gpt2-tiny's 2 layers), each at its largest stage's bytes as
        estimate gives them, with the cost model's bubble (P - 1) / (m + P - 1). The OOM doctor holds the largest
        stage to the limit: one byte less is refused, printing that stage's total."""
        result = memtrain("plan", *FLAGS, "--ranks", 2, "--device-memory", "1GiB", "--global-batch-size", 8,
                          "--top", 1000, "--data", self.data)
        self.assertEqual(result.returncode, 0, result.stderr)
        entries = re.findall(r"per rank \S+ \S+ = (\d+) B .*?s/step \(pipeline bubble ([\d.]+)%\)\n\s+(mpirun .*)\n",
                             result.stdout)
        self.assertTrue(entries, result.stdout)
        for planned, bubble, command in entries:
            self.assertIn(" --pipeline-model-parallel-size 2 ", command)
            micro_batches = 8 // int(re.search(r"--micro-batch-size (\d+)", command).group(1))
            self.assertAlmostEqual(float(bubble), 100 / (micro_batches + 1), places=1)
            self.assertEqual(self.estimated_total(command), int(planned), command)
        stages = ["--pipeline-model-parallel-size", 2, "--global-batch-size", 8, "--micro-batch-size", 2]
        args = run_flags(*FLAGS, *stages, data=self.data, train_iters=1, out=self.tmp / "doctor-pp")
        largest = self.estimated_total(shlex.join(["mpirun", "-np", "2", "memtrain", "train", *map(str, args)]))
        refused = memtrain("train", *args, "--memory-limit", largest - 1, ranks=2)
        self.assertEqual(refused.returncode, 3, refused.stderr)
        self.assertEqual(int(re.search(r"^  total\s+(\d+)", refused.stdout, re.M).group(1)), largest)

    def test_plan_at_another_level_uses_its_profile(self):
        """--cpu-isa avx2: the avx2 profile shipped in profiles/, said to be of another thread count than this
        plan's one thread; the listed bytes are estimate's at avx2 (bf16 with fp32 conversion tiles)."""
        result = memtrain("plan", *FLAGS, "--device-memory", "1GiB", "--global-batch-size", 8, "--cpu-isa", "avx2",
                          "--top", 20)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("1 thread per rank at avx2\nhardware profile: avx2, 2 threads, calibrated on ", result.stdout)
        # " on CPU" after the thread when avx2 is this machine's level, which then also compares the CPU model.
        self.assertRegex(result.stdout, r"\(built-in profiles/avx2-2threads.json; this plan: avx2, 1 thread"
                                        r"( on [^:]+)?: rates from another thread count\)")
        entries = re.findall(r"per rank \S+ \S+ = (\d+) B .*\n\s+(memtrain .*--bf16.*)\n", result.stdout)
        self.assertTrue(entries, result.stdout)
        for planned, command in entries:
            args = shlex.split(command)[2:]
            result = memtrain("estimate", *args, "--cpu-isa", "avx2", "--json")
            self.assertEqual(json.loads(result.stdout)["ranks"][0]["total_bytes"], int(planned), command)
        bad = memtrain("plan", *FLAGS, "--device-memory", "1GiB", "--global-batch-size", 8, "--cpu-isa", "sse9")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--cpu-isa sse9", bad.stderr)

    def test_plan_rejects_bad_sizes(self):
        result = memtrain("plan", "--model", "gpt2-tiny", "--device-memory", "80 parsecs", "--global-batch-size", 8)
        self.assertEqual(result.returncode, 2)
        self.assertIn("--device-memory", result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1)

    def test_oom_doctor_refuses_and_its_suggestion_fits(self):
        out = self.tmp / "doctor"
        args = run_flags(*FLAGS, data=self.data, micro_batch_size=8, train_iters=1, out=out)
        total = self.refused_total(args)
        limit = total * 2 // 3
        refused = memtrain("train", *args, "--memory-limit", limit)
        self.assertEqual(refused.returncode, 3, refused.stderr)
        self.assertIn("--memory-limit", refused.stderr)
        self.assertFalse((out / "memory.json").exists())
        change = re.search(r"changes that fit, fastest first: (add|use) (.*?): -", refused.stdout)
        self.assertIsNotNone(change, refused.stdout)
        self.trains_within(with_change(args, shlex.split(change.group(2))), limit, out)

    def planned_runs(self, device_memory):
        """`plan`'s listed runs within `device_memory` (4 sequences a step): (bytes, command) each."""
        result = memtrain("plan", *FLAGS, "--device-memory", device_memory, "--global-batch-size", 4, "--top",
                          1000, "--data", self.data)
        self.assertEqual(result.returncode, 0, result.stderr)
        entries = re.findall(r"per rank \S+ \S+ = (\d+) B .*\n\s+(memtrain .*)\n", result.stdout)
        self.assertTrue(entries, result.stdout)
        return [(int(planned), command) for planned, command in entries], result.stdout

    def test_only_8bit_moments_fit(self):
        """Between the smallest run of AdamW's ordinary step with 16- or 32-bit moments and the smallest with 8-bit
        ones (which they are depends on this CPU's level: below AVX512-BF16 a bf16 product's conversion tiles can
        make fp32 runs the smaller; the search over every configuration finds them): plan lists AdamW's ordinary
        step only with 8-bit moments, in Megatron's flags, beside the optimizers that keep less (Adam-mini, the
        update in the backward), each at estimate's bytes; the OOM doctor offers the smallest wide run int8
        moments with their predicted slowdown, and the run trains with them within the limit, measured ==
        planned."""
        eight_bit = r" --exp-avg-dtype (int8|fp8) --exp-avg-sq-dtype \1 "
        others = ("--optimizer adam-mini", "--optimizer-in-backward")
        every, _ = self.planned_runs("1TiB")
        plain = [(planned, command) for planned, command in every if not any(o in command for o in others)]
        wide = min((run for run in plain if not re.search(eight_bit, run[1])), default=None)
        narrow = min((run for run in plain if re.search(eight_bit, run[1])), default=None)
        self.assertIsNotNone(wide)
        self.assertIsNotNone(narrow)
        limit = (wide[0] + narrow[0]) // 2
        self.assertLess(narrow[0], limit)
        entries, listing = self.planned_runs(f"{limit}B")
        for planned, command in entries:
            if not any(other in command for other in others):
                self.assertRegex(command, eight_bit)
            self.assertEqual(self.estimated_total(command), planned, command)
        # Adam-mini with bf16 m fits here; the update in the backward would take the global batch of 4 in one
        # micro-batch, whose activations do not.
        self.assertTrue(any(others[0] in command for _, command in entries), listing)

        out = self.tmp / "doctor8"
        args = with_change(shlex.split(wide[1])[2:], ["--train-iters", "1", "--out", str(out)])
        refused = memtrain("train", *args, "--memory-limit", limit)
        self.assertEqual(refused.returncode, 3, refused.stderr)
        change = re.search(r"(?:: |; or )use (--exp-avg-dtype int8 --exp-avg-sq-dtype int8): -[^,]+, step \+\d+%",
                           refused.stdout)
        self.assertIsNotNone(change, refused.stdout)
        self.trains_within(with_change(args, shlex.split(change.group(1))), limit, out)

    def test_plan_and_doctor_keep_lora_and_the_quantized_base(self):
        """plan with LoRA over an nf4 base: every listed command keeps the LoRA and base flags, each at estimate's
        bytes with the frozen base among them; the first trains within the limit. The OOM doctor's change for such
        a run fits too."""
        lora = ["--lora-rank", "4", "--base-quant", "nf4"]
        result = memtrain("plan", *FLAGS, *lora, "--device-memory", "64MiB", "--global-batch-size", 4, "--top", 50,
                          "--data", self.data)
        self.assertEqual(result.returncode, 0, result.stderr)
        entries = re.findall(r"per rank \S+ \S+ = (\d+) B \(model states [^,]+, frozen .*\n\s+(memtrain .*)\n",
                             result.stdout)
        self.assertGreaterEqual(len(entries), 3, result.stdout)
        for planned, command in entries:
            self.assertIn(" --lora-rank 4 --base-quant nf4", command)
            self.assertEqual(self.estimated_total(command), int(planned), command)
        out = self.tmp / "plan-lora"
        args = with_change(shlex.split(entries[0][1])[2:], ["--train-iters", "1", "--out", str(out)])
        self.trains_within(args, 64 << 20, out)

        out = self.tmp / "doctor-lora"
        args = run_flags(*FLAGS, *lora, data=self.data, micro_batch_size=8, train_iters=1, out=out)
        limit = self.refused_total(args) * 2 // 3
        refused = memtrain("train", *args, "--memory-limit", limit)
        self.assertEqual(refused.returncode, 3, refused.stderr)
        change = re.search(r"changes that fit, fastest first: (add|use) (.*?): -", refused.stdout)
        self.assertIsNotNone(change, refused.stdout)
        self.trains_within(with_change(args, shlex.split(change.group(2))), limit, out)

    def test_memory_limit_must_be_a_size(self):
        result = self.train(*FLAGS, "--memory-limit", "lots", train_iters=1)
        self.assertEqual(result.returncode, 2)
        self.assertIn("--memory-limit", result.stderr)



class CalibrateTest(CliTestCase):
    """Its own CTest entry (cli.calibrate): the measurements run GPT-2-sized products, which the sanitizer build
    leaves out (scripts/test.sh)."""

    def test_calibrate_writes_a_profile_that_plan_reads(self):
        """One process at this CPU's level: every rate positive and MPI absent; two ranks under mpirun with the kernels
        capped to generic (bf16 products through fp32 tiles, beside the exchanges too): MPI bandwidth and the share
        of an exchange hidden behind the kernels measured too. Both name their level, threads and CPU. plan ranks
        with the file it is given."""
        for ranks in (1, 2):
            path = self.tmp / f"profile{ranks}.json"
            args = ["calibrate", "--threads", 1, "--seconds-per-test", 0.01, "--scratch-dir", self.tmp, "--out", path]
            env = {"MEMTRAIN_MAX_ISA": "generic"} if ranks > 1 else None
            result = memtrain(*args, ranks=ranks, env=env)
            self.assertEqual(result.returncode, 0, result.stderr)
            profile = read_json(path)
            rates = [profile["memory_gbps"], profile["disk_gbps"], *profile["attention_gflops"].values(),
                     *profile["lm_head_gflops"].values(), *profile["adamw_mparams_per_sec"].values(),
                     *profile["elementwise_melems_per_sec"].values()]
            for dtype in ("fp32", "bf16"):
                for direction in ("forward", "backward"):
                    for by_rows in profile["linear_gflops"][dtype][direction].values():
                        rates += by_rows
            self.assertTrue(all(rate > 0 for rate in rates), profile)
            # AdamW at each moment dtype the cost model prices, the 8-bit kernels' included.
            self.assertEqual(set(profile["adamw_mparams_per_sec"]),
                             {"fp32_moments", "bf16_moments", "fp8_moments", "int8_moments"})
            levels = ["generic"] if ranks > 1 else ["generic", "avx2", "avx512", "avx512_bf16"]
            self.assertIn(profile["cpu_isa"], levels)
            self.assertEqual(profile["threads"], 1)
            self.assertTrue(profile["cpu_model"])
            if ranks > 1:
                self.assertGreater(profile["mpi_gbps"], 0)
                self.assertLessEqual(profile["comm_overlap"], 1)
            else:
                self.assertIsNone(profile["mpi_gbps"])
                self.assertIsNone(profile["comm_overlap"])
            planned = memtrain("plan", *FLAGS, "--device-memory", "1GiB", "--global-batch-size", 8, "--profile", path)
            self.assertEqual(planned.returncode, 0, planned.stderr)
            self.assertIn(str(path), planned.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
