"""One binary on older CPUs: memtrain trains under qemu-user as an x86-64-v2 CPU without AVX (Nehalem) and as
an AVX2 CPU without AVX-512 (Haswell), in bf16 with both O2 flags, detects the emulated CPU's level, keeps
measured == planned memory, and gives the same losses, bit for bit, as this machine capped at that level.

usage: test_old_cpus.py MEMTRAIN QEMU_X86_64
"""
import json
import os
import subprocess
import sys
import unittest

from byte_data import ByteDataTestCase

QEMU = "qemu-x86_64"
CPUS = {"Nehalem": "generic", "Haswell": "avx2"}


class OldCpus(ByteDataTestCase):
    def train(self, name, prefix, env):
        out = self.tmp / name
        flags = ["train", "--model", "gpt2-tiny", "--data", self.data, "--seq-length", "32", "--micro-batch-size",
                 "2", "--train-iters", "4", "--log-interval", "1", "--eval-interval", "0", "--bf16",
                 "--o2-optimizer", "--o2-gradient", "--out", out]
        result = subprocess.run([*prefix, self.MEMTRAIN, *map(str, flags)], capture_output=True, text=True,
                                timeout=600, env={**os.environ, **env})
        self.assertEqual(result.returncode, 0, result.stderr)
        memory = json.loads((out / "memory.json").read_text())
        losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
        return memory, losses

    def test_emulated_cpus_train_like_the_capped_host(self):
        for cpu, level in CPUS.items():
            with self.subTest(cpu=cpu):
                # This machine's environment may force OpenBLAS's core type; the emulated CPU gets its own.
                memory, losses = self.train(cpu, [QEMU, "-cpu", cpu], {"OPENBLAS_CORETYPE": cpu})
                self.assertEqual(memory["cpu_isa"], level)
                self.assertEqual(memory["planned"], memory["measured"])
                host_memory, host_losses = self.train(cpu + "-host", [], {"MEMTRAIN_MAX_ISA": level})
                self.assertEqual(host_memory["planned"], memory["planned"])
                self.assertEqual(losses, host_losses)


if __name__ == "__main__":
    OldCpus.MEMTRAIN, QEMU = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
