"""Pipeline parallelism through the command line, under mpirun: P = 2 stages, alone and with T = 2 tensor-parallel
ranks (with and without sequence parallelism) or D = 2 data-parallel ranks (ZeRO 0 and 1), follow one process with
the same global batch, step for step (loss, gradient norm, validation loss), for GPT-2 (tied head: the first and
last stage sum the embedding's gradient) and LLaMA with grouped-query attention, in fp32 within 1e-5 and bf16/fp16
within the precision tests' tolerance; recompute under pipeline parallelism; two runs of one layout are bitwise
equal; every rank's memory.rank{r}.json has measured == planned; a stage's activations hold the micro-batches
1F1B keeps in flight, however many the step has; a rank that dies ends the job; layouts that do not divide, and
features not run under pipelines, are usage errors naming the flags.

Runs the binary memtrain_cli.py names.
"""
import json
import unittest

from memtrain_cli import (CliTestCase, assert_follows, command, compared_records, kill_a_rank, memtrain, read_memory,
                          read_metrics, run_flags)

STEPS = 6
PP = ["--pipeline-model-parallel-size", "2"]
TP = ["--tensor-model-parallel-size", "2"]


class PipelineParallel(CliTestCase):
    def run_layout(self, name, ranks, *flags, model="gpt2-tiny", global_batch_size=4, **more):
        """Trains on `ranks` processes into self.tmp / name; returns that folder."""
        out = self.tmp / name
        settings = dict(train_iters=STEPS, no_shuffle=True, eval_interval=3, eval_iters=2, threads=1)
        settings.update(more)
        self.train(*flags, out=out, ranks=ranks, expect=0, model=model, global_batch_size=global_batch_size,
                   micro_batch_size=2, **settings)
        return out

    def assert_follows(self, out, reference, tolerance):
        assert_follows(self, out, reference, tolerance, STEPS)

    def assert_measured_equals_planned(self, out, ranks):
        for rank in range(ranks):
            memory = read_memory(out, rank)
            self.assertEqual(memory["measured"], memory["planned"], f"rank {rank}")

    def test_fp32_layouts_follow_one_process(self):
        for model in ("gpt2-tiny", "llama-tiny"):
            single = self.run_layout(f"{model}-single", 1, model=model)
            for name, ranks, flags in (("pp2", 2, PP), ("tp2-pp2", 4, TP + PP),
                                       ("tp2-pp2-sp", 4, TP + PP + ["--sequence-parallel"]),
                                       ("pp2-dp2", 4, PP), ("pp2-dp2-zero1", 4, PP + ["--zero-stage", "1"])):
                with self.subTest(model=model, layout=name):
                    out = self.run_layout(f"{model}-{name}", ranks, *flags, model=model)
                    self.assert_follows(out, single, 1e-5)
                    self.assert_measured_equals_planned(out, ranks)
                    # The stages' exchanges are waited for between kernels: exposed, every step.
                    self.assertTrue(all(r["comm_exposed_ms"] > 0 for r in read_metrics(out)))

    def test_recompute_and_longer_pipelines_of_micro_batches(self):
        # 8 micro-batches a step: the stages run 1F1B's warm-up, steady state and cool-down.
        single = self.run_layout("single", 1, global_batch_size=16)
        for name, flags in (("full", ["--recompute-granularity", "full", "--recompute-method", "uniform",
                                      "--recompute-num-layers", "1"]),
                            ("selective", ["--recompute-granularity", "selective"]), ("none", [])):
            with self.subTest(recompute=name):
                out = self.run_layout(name, 2, *PP, *flags, global_batch_size=16)
                self.assert_follows(out, single, 1e-5)

    def test_16_bit_precisions_follow_one_process(self):
        for precision in ("--bf16", "--fp16"):
            for model in ("gpt2-tiny", "llama-tiny"):
                with self.subTest(precision=precision, model=model):
                    single = self.run_layout(f"{model}{precision}-single", 1, precision, model=model)
                    for name, ranks, flags in (("pp2", 2, PP), ("tp2-pp2", 4, TP + PP)):
                        out = self.run_layout(f"{model}{precision}-{name}", ranks, precision, *flags, model=model)
                        self.assert_follows(out, single, 1e-2)

    def test_two_runs_are_bitwise_equal(self):
        first = self.run_layout("first", 4, "--bf16", *TP, *PP, model="llama-tiny")
        second = self.run_layout("second", 4, "--bf16", *TP, *PP, model="llama-tiny")
        self.assertEqual(compared_records(first), compared_records(second))

    def test_every_rank_measured_equals_planned_equals_estimate(self):
        for model, dp, flags in (("gpt2-tiny", 2, ["--zero-stage", "1"]), ("llama-tiny", 1, ["--bf16"]),
                                 ("gpt2-tiny", 1, TP + ["--sequence-parallel"])):
            ranks = 2 * dp * (2 if "--tensor-model-parallel-size" in flags else 1)
            with self.subTest(model=model, ranks=ranks, flags=flags):
                out = self.run_layout(f"{model}-{ranks}-estimated", ranks, *PP, *flags, model=model)
                estimate = memtrain("estimate", "--pp", "2", "--dp", str(dp), "--json",
                                    *run_flags(*flags, model=model, global_batch_size=4, micro_batch_size=2,
                                               train_iters=STEPS, eval_interval=3, eval_iters=2, threads=1))
                self.assertEqual(estimate.returncode, 0, estimate.stderr)
                estimated = json.loads(estimate.stdout)["ranks"]
                self.assertEqual([r["rank"] for r in estimated], list(range(ranks)))
                for r in estimated:
                    memory = read_memory(out, r["rank"])
                    self.assertEqual(memory["measured"], memory["planned"])
                    self.assertEqual(r["bytes"], memory["planned"], f"rank {r['rank']}")

    def test_stages_hold_the_micro_batches_in_flight(self):
        def activations(micro_batches):
            out = self.run_layout(f"m{micro_batches}", 2, *PP, global_batch_size=2 * micro_batches,
                                  train_iters=1, eval_interval=0)
            self.assert_measured_equals_planned(out, 2)
            return [read_memory(out, rank)["planned"]["activations"] for rank in range(2)]
        one, two, eight = activations(1), activations(2), activations(8)
        # Under 1F1B the first of 2 stages keeps 2 micro-batches' activations, the last one 1, however many the
        # step has; one micro-batch leaves the first stage nothing to overlap.
        self.assertEqual(two, eight)
        self.assertEqual(one[1], two[1])
        self.assertGreater(two[0], 1.5 * one[0])

    def test_a_rank_that_dies_ends_the_whole_job(self):
        # 2 stages x 2 data-parallel ranks exchanging activations; the last rank is killed mid-run.
        out = self.tmp / "killed"
        args = command("train", *PP, *run_flags(data=self.data, out=out, train_iters=100000, micro_batch_size=2,
                                                global_batch_size=8, threads=1), ranks=4)
        kill_a_rank(self, args, out, 4)

    def test_layouts_that_do_not_divide_are_usage_errors(self):
        def refused(ranks, *flags, model="gpt2-tiny"):
            result = self.train(*flags, out=self.tmp / "refused", ranks=ranks, model=model)
            self.assertEqual(result.returncode, 2, result.stderr)
            return result.stderr
        self.assertIn("--pipeline-model-parallel-size 2 does not divide the world of 3 ranks", refused(3, *PP))
        self.assertIn("--tensor-model-parallel-size 2 x --pipeline-model-parallel-size 2 does not divide the "
                      "world of 2 ranks", refused(2, *TP, *PP))
        stderr = refused(4, "--pipeline-model-parallel-size", "4")
        self.assertIn("--pipeline-model-parallel-size 4 must divide the model's 2 layers", stderr)
        stderr = refused(2, *PP, "--zero-stage", "2")
        self.assertIn("--pipeline-model-parallel-size 2 with --zero-stage 2", stderr)
        self.assertIn("--pipeline-model-parallel-size 2 with --lora-rank", refused(2, *PP, "--lora-rank", "4"))


if __name__ == "__main__":
    unittest.main()
