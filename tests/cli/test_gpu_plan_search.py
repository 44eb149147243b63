"""`plan` and `calibrate` for a GPU: `plan --device cuda --gpu NAME|FILE` searches the configurations the GPU
backend runs (never Adam-mini or NVMe offload), each fitting the card with its runtime overhead, ranked on rates
from the card's peaks, and each printed command line is the plan `estimate --device cuda --gpu` gives; `--gpu`
reads a profile file as `calibrate --device cuda` writes one; calibrate without a GPU is refused and writes
nothing. Runs in a build with CUDA, on any machine.
"""
import json
import re
import shlex
import shutil
import unittest
from pathlib import Path

from memtrain_cli import CliTestCase, memtrain

H100 = Path(__file__).resolve().parents[2] / "profiles" / "gpu" / "h100.json"
FLAGS = ["--model", "gpt2-tiny", "--seq-length", "64", "--threads", "1", "--global-batch-size", "8"]
# A listed configuration: its total, what the GPU commits for it and its command line.
ENTRY = re.compile(r"per rank \S+ \S+ = (\d+) B .*?, committed on the GPU \S+ \S+ = (\d+) B \+ runtime overhead \| .*?\n"
                   r"\s+(memtrain .*)\n")


class GpuPlanSearch(CliTestCase):
    def plan(self, *flags):
        result = memtrain("plan", *FLAGS, "--device", "cuda", "--top", 1000, *flags)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout, ENTRY.findall(result.stdout)

    def estimate(self, command, *flags):
        words = shlex.split(command)
        result = memtrain("estimate", *words[words.index("train") + 1:], *flags, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)

    def test_every_candidate_runs_on_the_gpu_and_is_the_estimates_plan(self):
        h100 = json.loads(H100.read_text())
        # Room beside the overhead for only some configurations: each buffer takes whole 2 MiB granules.
        limit = h100["runtime_overhead_bytes"] + (50 << 20)
        listed = {}
        for gpu_flags in (["--gpu", "h100"], ["--gpu", "h100", "--device-memory", f"{limit}B"]):
            with self.subTest(flags=gpu_flags):
                text, entries = self.plan(*gpu_flags, "--offload-path", self.tmp)
                memory = limit if "--device-memory" in gpu_flags else h100["memory_bytes"]
                self.assertIn("on the GPU (NVIDIA H100 80GB HBM3", text)
                self.assertIn("hardware profile: NVIDIA H100 80GB HBM3 (h100, published peaks", text)
                self.assertIn("upper bounds", text)
                self.assertGreaterEqual(len(entries), 3, text)
                for total, committed, command in entries:
                    self.assertIn("--device cuda", command)
                    # What the GPU backend does not run yet is never proposed.
                    self.assertNotIn("adam-mini", command)
                    self.assertNotIn("--offload-optimizer", command)
                    self.assertLessEqual(int(committed) + h100["runtime_overhead_bytes"], memory)
                    plan = self.estimate(command, *gpu_flags)
                    rank = plan["ranks"][0]
                    self.assertEqual((rank["total_bytes"], rank["device_committed_total_bytes"]),
                                     (int(total), int(committed)))
                    self.assertTrue(plan["fits"], command)
                listed[memory] = len(entries)
        self.assertLess(listed[limit], listed[h100["memory_bytes"]])

    def test_what_a_gpu_plan_refuses(self):
        for flags, mentions in [
            (["--device", "cuda", "--gpu", "h100", "--ranks", 2], ["--device cuda", "2 ranks", "one GPU"]),
            (["--gpu", "h100", "--device-memory", "1GiB"], ["--gpu h100", "--device cuda"]),
            (["--device", "cuda"], ["--device cuda needs --gpu", "h100"]),
            (["--device", "cuda", "--gpu", "v100"], ["--gpu v100", "a100-80gb, h100, h200"]),
            (["--device", "cuda", "--gpu", "h100", "--profile", "cpu.json"], ["--profile cpu.json", "--gpu"]),
            ([], ["--device-memory"]),
        ]:
            with self.subTest(flags=flags):
                self.assert_error(memtrain("plan", *FLAGS, *flags), 2, *mentions)

    def test_gpu_reads_a_profile_file(self):
        measured = json.loads(H100.read_text())
        measured.update(source="calibrate", gpu="nvidia-h100-80gb-hbm3", runtime_overhead_bytes=3 << 30)
        path = self.tmp / "measured.json"
        path.write_text(json.dumps(measured))
        text = memtrain("estimate", *FLAGS, "--device", "cuda", "--gpu", path)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("runtime overhead 3.00 GiB", text.stdout)
        self.assertIn("measured", text.stdout)
        plan = memtrain("estimate", *FLAGS, "--device", "cuda", "--gpu", path, "--json")
        self.assertEqual(json.loads(plan.stdout)["gpu"]["runtime_overhead_bytes"], 3 << 30)
        planned, entries = self.plan("--gpu", path)
        self.assertIn("measured by calibrate peaks", planned)
        self.assertIn("runtime overhead 3.00 GiB", planned)
        self.assertTrue(entries)

    def test_a_bad_profile_file_is_a_data_error_naming_it(self):
        missing_key = json.loads(H100.read_text())
        del missing_key["memory_gbps"]
        for name, content, mention in [("broken.json", "{", "not valid JSON"),
                                       ("partial.json", json.dumps(missing_key), "memory_gbps"),
                                       ("absent.json", None, "cannot open")]:
            path = self.tmp / name
            if content is not None:
                path.write_text(content)
            for command in ("estimate", "plan"):
                with self.subTest(file=name, command=command):
                    result = memtrain(command, *FLAGS, "--device", "cuda", "--gpu", path)
                    self.assert_error(result, 1, f"--gpu {path}", mention)

    def test_calibrate_measures_a_gpu_or_says_there_is_none(self):
        out = self.tmp / "gpu.json"
        result = memtrain("calibrate", "--device", "cuda", "--seconds-per-test", 0.05, "--out", out)
        if result.returncode != 0:
            self.assert_error(result, 2, "--device cuda", "no GPU found")
            self.assertFalse(out.exists())
            return
        # Where a GPU is lent: a profile that estimate and plan read, with its measured overhead.
        profile = json.loads(out.read_text())
        self.assertEqual(profile["source"], "calibrate")
        self.assertTrue(all(profile[key] > 0 for key in
                            ("memory_bytes", "runtime_overhead_bytes", "bf16_tflops", "tf32_tflops", "fp32_tflops",
                             "memory_gbps")), profile)
        copied = self.tmp / "copy.json"
        shutil.copy(out, copied)
        self.assertTrue(self.plan("--gpu", copied)[1])


if __name__ == "__main__":
    unittest.main()
