"""Data parallelism through the command line, under mpirun: N = 2 ranks with micro-batch b follow one process
accumulating 2 micro-batches of b (ZeRO stages 0 to 3, fp32 and bf16), repeat bitwise, and every rank's
memory.rank{r}.json shows measured == planned and the per-parameter bytes of its stage.

usage: test_data_parallel.py MEMTRAIN
"""
import json
import subprocess
import sys
import unittest
from pathlib import Path

from byte_data import ByteDataTestCase

MEMTRAIN = sys.argv.pop(1) if len(sys.argv) > 1 else "build/memtrain"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
STEPS = 4


class DataParallel(ByteDataTestCase):
    MEMTRAIN = MEMTRAIN
    PREFIX = "memtrain-dp-"

    def train(self, name, ranks, *flags, global_batch=4, model="gpt2-tiny"):
        out = self.tmp / name
        args = [MEMTRAIN, "train", "--model", model, "--data", str(self.data), "--seq-length", "32",
                "--micro-batch-size", "2", "--global-batch-size", str(global_batch), "--train-iters", str(STEPS),
                *([] if "--eval-interval" in flags else ["--eval-interval", "0"]), "--no-shuffle", "--threads", "1", "--out", str(out), *flags]
        result = subprocess.run((MPIRUN if ranks == 2 else []) + args, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return out

    def losses(self, out):
        return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]

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
                    memory = json.loads((out / f"memory.rank{rank}.json").read_text())
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
                    memory = json.loads((out / f"memory.rank{rank}.json").read_text())
                    self.assertEqual(memory["planned"], memory["measured"])
                    self.assertAlmostEqual(memory["model_state_bytes_per_param"]["planned"], bytes_per_param,
                                           delta=1e-3)

    def test_saving_whole_weights_under_stage_3_is_a_usage_error(self):
        out = self.tmp / "s3-save"
        result = subprocess.run([MEMTRAIN, "train", "--model", "gpt2-tiny", "--data", str(self.data),
                                 "--train-iters", "1", "--zero-stage", "3", "--save-weights", str(out / "w.st"),
                                 "--out", str(out)], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--zero-stage 3", result.stderr)
        self.assertFalse(out.exists())


if __name__ == "__main__":
    unittest.main(verbosity=2)
