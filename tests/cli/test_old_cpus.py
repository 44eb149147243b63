"""One binary on older CPUs: memtrain trains under qemu-user as an x86-64-v2 CPU without AVX (Nehalem) and as
an AVX2 CPU without AVX-512 (Haswell), in bf16 with both O2 flags, detects the emulated CPU's level, keeps
measured == planned memory, and gives the same losses, bit for bit, as this machine capped at that level.

usage: test_old_cpus.py QEMU_X86_64   (runs the binary memtrain_cli.py names)
"""
import sys
import unittest

from memtrain_cli import CliTestCase, read_memory, read_metrics

QEMU = "qemu-x86_64"
CPUS = {"Nehalem": "generic", "Haswell": "avx2"}


class OldCpus(CliTestCase):
    def train(self, name, launcher, env):
        out = self.tmp / name
        super().train(out=out, launcher=launcher, env=env, timeout=600, expect=0, train_iters=4, log_interval=1,
                      bf16=True, o2_optimizer=True, o2_gradient=True)
        return read_memory(out), [r["loss"] for r in read_metrics(out)]

    def test_emulated_cpus_train_like_the_capped_host(self):
        for cpu, level in CPUS.items():
            with self.subTest(cpu=cpu):
                # This machine's environment may force OpenBLAS's core type; the emulated CPU gets its own.
                memory, losses = self.train(cpu, [QEMU, "-cpu", cpu], {"OPENBLAS_CORETYPE": cpu})
                self.assertEqual(memory["cpu_isa"], level)
                self.assertEqual(memory["planned"], memory["measured"])
                host_memory, host_losses = self.train(cpu + "-host", None, {"MEMTRAIN_MAX_ISA": level})
                self.assertEqual(host_memory["planned"], memory["planned"])
                self.assertEqual(losses, host_losses)


if __name__ == "__main__":
    QEMU = sys.argv.pop(1)
    unittest.main(verbosity=2)
