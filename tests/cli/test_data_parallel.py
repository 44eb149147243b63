"""Data parallelism through the command line, under mpirun: N = 2 ranks with micro-batch b follow one process
accumulating 2 micro-batches of b (ZeRO stages 0 and 1, fp32 and bf16), repeat bitwise, and every rank's
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

    def train(self, name, ranks, *flags):
        out = self.tmp / name
        args = [MEMTRAIN, "train", "--model", "gpt2-tiny", "--data", str(self.data), "--seq-length", "32",
                "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", str(STEPS),
                "--eval-interval", "0", "--no-shuffle", "--threads", "1", "--out", str(out), *flags]
        result = subprocess.run((MPIRUN if ranks == 2 else []) + args, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return out

    def losses(self, out):
        return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]

    def test_two_ranks_follow_one_process_accumulating(self):
        for precision, tolerance in (([], 1e-5), (["--bf16"], 1e-2)):
            single = self.losses(self.train("single" + "".join(precision), 1, *precision))
            for stage in ("0", "1"):
                with self.subTest(precision=precision, stage=stage):
                    out = self.train(f"dp{stage}" + "".join(precision), 2, "--zero-stage", stage, *precision)
                    for a, b in zip(self.losses(out), single):
                        self.assertAlmostEqual(a, b, delta=tolerance * b)

    def test_runs_repeat_bitwise(self):
        first = self.losses(self.train("repeat-a", 2, "--zero-stage", "1", "--bf16"))
        second = self.losses(self.train("repeat-b", 2, "--zero-stage", "1", "--bf16"))
        self.assertEqual(first, second)

    def test_every_rank_measures_its_plan(self):
        out = self.train("memory", 2, "--zero-stage", "1", "--bf16")
        per_param = []
        for rank in (0, 1):
            memory = json.loads((out / f"memory.rank{rank}.json").read_text())
            self.assertEqual(memory["planned"], memory["measured"])
            per_param.append(memory["model_state_bytes_per_param"]["planned"])
        # bf16 with fp32 master and Adam at stage 1: 2 weights + 4 gradients + (4 + 8) / 2 sharded, plus the
        # padding of an uneven last shard.
        for b in per_param:
            self.assertAlmostEqual(b, 6 + 12 / 2, delta=1e-3)

    def test_unimplemented_stage_is_a_usage_error(self):
        result = subprocess.run([MEMTRAIN, "train", "--model", "gpt2-tiny", "--data", str(self.data),
                                 "--train-iters", "1", "--zero-stage", "2", "--out", str(self.tmp / "s2")],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--zero-stage 2", result.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
