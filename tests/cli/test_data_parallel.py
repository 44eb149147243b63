"""Data parallelism through the command line, under mpirun: N = 2 ranks with micro-batch b follow one process
accumulating 2 micro-batches of b (ZeRO stages 0 to 3, fp32 and bf16), repeat bitwise, and every rank's
memory.rank{r}.json shows measured == planned and the per-parameter bytes of its stage.

Runs the binary memtrain_cli.py names.
"""
import json
import unittest

from memtrain_cli import CliTestCase, read_memory, read_metrics

STEPS = 4


class DataParallel(CliTestCase):
    def train(self, name, ranks, *flags, global_batch=4, model="gpt2-tiny"):
        """Trains on `ranks` processes into self.tmp / name, in order, and returns that folder."""
        out = self.tmp / name
        super().train(*flags, out=out, ranks=ranks, expect=0, model=model, global_batch_size=global_batch,
                      train_iters=STEPS, no_shuffle=True)
        return out

    def losses(self, out):
        return [r["loss"] for r in read_metrics(out)]

    def test_two_ranks_follow_one_process_accumulating(self):
        for precision, tolerance in (([], 1e-5), (["--bf16"], 1e-2)):
            single = self.losses(self.train("single" + "".join(precision), 1, *precision))
            for stage in ("0", "1", "2", "3"):
                with self.subTest(precision=precision, stage=stage):
                    out = self.train(f"dp{stage}" + "".join(precision), 2, "--zero-stage", stage, *precision)
                    losses = self.losses(out)
                    self.assertEqual(len(losses), len(single))
                    for a, b in zip(losses, single):
                        self.assertAlmostEqual(a, b, delta=tolerance * b)

    def test_sharded_stages_follow_one_process_with_accumulation_and_recompute(self):
        # Two micro-batches per rank: the windows of stages 2 and 3 add each one into the running shard sums;
        # full recompute reruns forward ops inside backward windows, gathering their block again.
        flags = ["--recompute-granularity", "full", "--recompute-method", "uniform",
                 "--recompute-num-layers", "1", "--eval-interval", "2", "--eval-iters", "2"]
        single = self.losses(self.train("single-accum", 1, *flags, global_batch=8))
        for stage in ("2", "3"):
            with self.subTest(stage=stage):
                out = self.train(f"accum{stage}", 2, "--zero-stage", stage, *flags, global_batch=8)
                for a, b in zip(self.losses(out), single):
                    self.assertAlmostEqual(a, b, delta=1e-5 * b)

    def test_llama_two_ranks_follow_one_process_accumulating(self):
        single = self.losses(self.train("llama-single", 1, "--bf16", model="llama-tiny"))
        for stage in ("1", "2", "3"):
            with self.subTest(stage=stage):
                out = self.train(f"llama-dp{stage}", 2, "--zero-stage", stage, "--bf16", model="llama-tiny")
                for a, b in zip(self.losses(out), single):
                    self.assertAlmostEqual(a, b, delta=1e-2 * b)
                for rank in (0, 1):
                    memory = read_memory(out, rank)
                    self.assertEqual(memory["planned"], memory["measured"])

    def test_runs_repeat_bitwise_with_or_without_overlap(self):
        for stage in ("0", "1", "2", "3"):
            with self.subTest(stage=stage):
                first = self.losses(self.train(f"repeat-a{stage}", 2, "--zero-stage", stage, "--bf16"))
                second = self.losses(self.train(f"repeat-b{stage}", 2, "--zero-stage", stage, "--bf16"))
                waited = self.losses(self.train(f"repeat-c{stage}", 2, "--zero-stage", stage, "--bf16",
                                                "--no-overlap-comm"))
                self.assertEqual(first, second)
                self.assertEqual(first, waited)

    def test_every_rank_measures_its_plan(self):
        # bf16 with fp32 master and Adam: 2 weights + 4 gradients + 4 master + 8 moments, of which stage 1
        # shards master and moments, stage 2 also gradients, stage 3 everything (N = 2), plus the padding of
        # an uneven last shard.
        expected = {"0": 18, "1": 6 + 12 / 2, "2": 2 + 16 / 2, "3": 18 / 2}
        for stage, bytes_per_param in expected.items():
            out = self.train(f"memory{stage}", 2, "--zero-stage", stage, "--bf16")
            for rank in (0, 1):
                with self.subTest(stage=stage, rank=rank):
                    memory = read_memory(out, rank)
                    self.assertEqual(memory["planned"], memory["measured"])
                    self.assertAlmostEqual(memory["model_state_bytes_per_param"]["planned"], bytes_per_param,
                                           delta=1e-3)

    def test_a_configuration_warning_is_printed_once_per_job(self):
        config = self.tmp / "ds.json"
        config.write_text(json.dumps({"steps_per_print": 10}))
        result = CliTestCase.train(self, out=self.tmp / "warned", ranks=2, expect=0, deepspeed_config=config)
        self.assertEqual(result.stderr.count("steps_per_print has no effect here"), 1, result.stderr)

    def test_saving_whole_weights_under_stage_3_is_a_usage_error(self):
        out = self.tmp / "s3-save"
        result = super().train(train_iters=1, zero_stage=3, save_weights=out / "w.st", out=out)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--zero-stage 3", result.stderr)
        self.assertFalse(out.exists())


if __name__ == "__main__":
    unittest.main(verbosity=2)
