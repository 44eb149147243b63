"""Tensor parallelism through the command line, under mpirun: T = 2 ranks (and T = 2 x D = 2 on 4), with and
without sequence parallelism, follow one process with the same global batch, step for step (loss, gradient norm, validation loss), for GPT-2 and LLaMA
with grouped-query attention, in fp32 within 1e-5 and bf16/fp16 within the precision tests' tolerance; ZeRO
over the data-parallel groups and recompute under tensor parallelism; two runs of one layout are bitwise
equal; every rank's memory.rank{r}.json has measured == planned == `memtrain estimate --tp 2 --dp D`; layouts
that do not divide are usage errors naming the flag; sequence parallelism holds fewer activation bytes.

Runs the binary memtrain_cli.py names.
"""
import json
import re
import unittest

from memtrain_cli import (CliTestCase, assert_follows, command, compared_records, kill_a_rank, memtrain, read_memory,
                          read_metrics, run_flags)

STEPS = 6


class TensorParallel(CliTestCase):
    def run_layout(self, name, tp, dp, *flags, model="gpt2-tiny"):
        """Trains on tp x dp processes (one when both are 1) into self.tmp / name; returns that folder."""
        out = self.tmp / name
        layout = ["--tensor-model-parallel-size", tp] if tp > 1 else []
        self.train(*layout, *flags, out=out, ranks=tp * dp, expect=0, model=model, global_batch_size=4,
                   micro_batch_size=2, train_iters=STEPS, no_shuffle=True, eval_interval=3, eval_iters=2)
        return out

    def assert_follows(self, out, reference, tolerance):
        assert_follows(self, out, reference, tolerance, STEPS)

    def test_fp32_layouts_follow_one_process(self):
        for model in ("gpt2-tiny", "llama-tiny"):
            single = self.run_layout(f"{model}-single", 1, 1, model=model)
            for tp, dp, flags in ((2, 1, []), (2, 2, []), (2, 1, ["--sequence-parallel"]),
                                  (2, 2, ["--sequence-parallel"])):
                with self.subTest(model=model, tp=tp, dp=dp, flags=flags):
                    out = self.run_layout(f"{model}-tp{tp}-dp{dp}{''.join(flags)}", tp, dp, *flags, model=model)
                    self.assert_follows(out, single, 1e-5)
                    # The tensor group's exchanges are waited for between kernels: exposed, every step.
                    self.assertTrue(all(r["comm_exposed_ms"] > 0 for r in read_metrics(out)))

    def test_zero_and_recompute_under_tensor_parallelism(self):
        single = self.run_layout("single", 1, 1)
        for name, dp, flags in (("zero1", 2, ["--zero-stage", "1"]), ("zero2", 2, ["--zero-stage", "2"]),
                                ("zero3", 2, ["--zero-stage", "3"]),
                                ("full", 1, ["--recompute-granularity", "full", "--recompute-method", "uniform",
                                             "--recompute-num-layers", "1"]),
                                ("selective", 1, ["--recompute-granularity", "selective"]),
                                ("sp-zero3", 2, ["--sequence-parallel", "--zero-stage", "3"]),
                                ("sp-full", 1, ["--sequence-parallel", "--recompute-granularity", "full",
                                                "--recompute-method", "uniform", "--recompute-num-layers", "1"]),
                                ("sp-selective", 1, ["--sequence-parallel", "--recompute-granularity",
                                                     "selective"])):
            with self.subTest(name=name):
                self.assert_follows(self.run_layout(name, 2, dp, *flags), single, 1e-5)

    def test_16_bit_precisions_follow_one_process(self):
        for precision in ("--bf16", "--fp16"):
            for model in ("gpt2-tiny", "llama-tiny"):
                with self.subTest(precision=precision, model=model):
                    single = self.run_layout(f"{model}{precision}-single", 1, 1, precision, model=model)
                    for flags in ([], ["--sequence-parallel"]):
                        out = self.run_layout(f"{model}{precision}-tp2{''.join(flags)}", 2, 1, precision, *flags,
                                              model=model)
                        self.assert_follows(out, single, 1e-2)

    def test_two_runs_are_bitwise_equal(self):
        first = self.run_layout("first", 2, 1, "--bf16", model="llama-tiny")
        second = self.run_layout("second", 2, 1, "--bf16", model="llama-tiny")
        self.assertEqual(compared_records(first), compared_records(second))

    def test_every_rank_measured_equals_planned_equals_estimate(self):
        for model, dp, flags in (("gpt2-tiny", 2, ["--zero-stage", "1"]), ("llama-tiny", 1, ["--bf16"]),
                                 ("gpt2-tiny", 1, ["--sequence-parallel"])):
            with self.subTest(model=model, dp=dp):
                out = self.run_layout(f"{model}-estimated", 2, dp, *flags, model=model)
                estimate = memtrain("estimate", "--tp", "2", "--dp", str(dp), "--json",
                                    *run_flags(*flags, model=model, global_batch_size=4, micro_batch_size=2,
                                               train_iters=STEPS, eval_interval=3, eval_iters=2))
                self.assertEqual(estimate.returncode, 0, estimate.stderr)
                ranks = json.loads(estimate.stdout)["ranks"]
                self.assertEqual([r["rank"] for r in ranks], list(range(2 * dp)))
                for r in ranks:
                    memory = read_memory(out, r["rank"])
                    self.assertEqual(memory["measured"], memory["planned"])
                    self.assertEqual(r["bytes"], memory["planned"], f"rank {r['rank']}")
                # Each rank holds half of the split parameters: fewer than one process's.
                whole_flags = [f for f in flags if f != "--sequence-parallel"]
                single = memtrain("estimate", "--json", *run_flags(*whole_flags, model=model, micro_batch_size=2))
                whole = json.loads(single.stdout)["ranks"][0]["num_params"]
                self.assertLess(ranks[0]["num_params"], whole * 0.75)

    def test_sequence_parallel_splits_the_residual_streams_activations(self):
        def activations(*flags):
            result = memtrain("estimate", "--tp", "2", "--json",
                              *run_flags(*flags, model="gpt2", seq_length=256, micro_batch_size=2))
            self.assertEqual(result.returncode, 0, result.stderr)
            return json.loads(result.stdout)["ranks"][0]["bytes"]["activations"]
        # GPT-2's 12 layers keep their inputs, norms' outputs and statistics for B*T/2 tokens each; the
        # gathered whole inputs of the products live only around them.
        tp, sp = activations(), activations("--sequence-parallel")
        self.assertLess(sp, 0.85 * tp)

    def test_plan_searches_tensor_parallel_sizes_with_their_exact_plans(self):
        result = memtrain("plan", "--model", "llama-tiny", "--ranks", "2", "--device-memory", "1GiB",
                          "--global-batch-size", "4", "--seq-length", "32", "--threads", "1", "--top", "1000")
        self.assertEqual(result.returncode, 0, result.stderr)
        candidates = [c for c in result.stdout.split("\n#")[1:] if "tensor parallel 2" in c.splitlines()[0]]
        self.assertTrue(candidates, result.stdout[-2000:])
        for candidate in candidates[:3]:
            planned = int(re.search(r"= (\d+) B", candidate).group(1))
            command = re.search(r"mpirun -np 2 memtrain train (.*)", candidate).group(1).split()
            self.assertIn("--tensor-model-parallel-size", command)
            estimate = memtrain("estimate", "--json", *command)
            self.assertEqual(estimate.returncode, 0, estimate.stderr)
            self.assertEqual(json.loads(estimate.stdout)["ranks"][0]["total_bytes"], planned)

    def test_a_rank_that_dies_ends_the_whole_job(self):
        # 2 x 2 ranks in their tensor and data groups' collectives; the last one is killed mid-run.
        out = self.tmp / "killed"
        args = command("train", "--tensor-model-parallel-size", "2", "--sequence-parallel",
                       *run_flags(data=self.data, out=out, train_iters=100000, micro_batch_size=2,
                                  global_batch_size=4), ranks=4)
        kill_a_rank(self, args, out, 4)

    def test_layouts_that_do_not_divide_are_usage_errors(self):
        # 3 ranks are not a multiple of 2; llama-tiny's 2 key/value heads do not split 4 ways.
        result = self.train("--tensor-model-parallel-size", "2", out=self.tmp / "three", ranks=3)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--tensor-model-parallel-size 2 does not divide the world of 3 ranks", result.stderr)
        result = memtrain("estimate", "--tp", "4", *run_flags(model="llama-tiny"))
        self.assert_error(result, 2, "--tensor-model-parallel-size 4", "key/value heads")
        result = memtrain("estimate", "--tp", "2", *run_flags("--lora-rank", "4"))
        self.assert_error(result, 2, "--tensor-model-parallel-size 2", "--lora-rank")
        self.assert_error(memtrain("estimate", *run_flags("--sequence-parallel")), 2, "--sequence-parallel",
                          "--tensor-model-parallel-size")


if __name__ == "__main__":
    unittest.main()
