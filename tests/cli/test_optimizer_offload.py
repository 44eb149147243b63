"""Optimizer offload (--offload-optimizer nvme) through the command line: offloaded training is bitwise the
in-memory run (metrics.jsonl losses and gradient norms, and the --save-weights file) in every precision mode,
from --init-from too, in one process and under mpirun with ZeRO stage 1; memory.json plans and measures only
the chunk slots for master weights and moments and reports the file bytes apart; the files are gone after the
run; a bad --offload-path is one clear error with nothing written.

Runs the binary memtrain_cli.py names; unittest arguments select, e.g. -k SingleProcess.
"""
import fcntl
import json
import unittest
from pathlib import Path

from memtrain_cli import CliTestCase, read_json, read_memory, read_metrics

STEPS = 4
CHUNK_MB = 0.01  # 2621 elements: gpt2-tiny's shard streams in dozens of chunks, the last one shorter
CHUNK_ELEMS = int(CHUNK_MB * (1 << 20) / 4)

# flags -> (master bytes, bytes per moment) per parameter
MODES = {
    "fp32": ([], 0, 4),
    "bf16": (["--bf16"], 4, 4),
    "bf16 O2 stochastic": (["--bf16", "--o2-optimizer", "--o2-stochastic-rounding"], 4, 2),
    "fp16": (["--fp16"], 4, 4),
    "bf16 no master": (["--bf16", "--o2-optimizer", "--o2-gradient", "--no-master-weights"], 0, 2),
}


class OffloadTestCase(CliTestCase):
    def run_train(self, name, *flags, ranks=1):
        """Trains on `ranks` processes into self.tmp / name, saving the weights where a rank holds them all."""
        out = self.tmp / name
        # Under ZeRO-3 no rank holds whole weights to save; the losses and gradient norms still compare.
        save = None if "3" in flags else out / "model.safetensors"
        return out, super().train(*flags, out=out, ranks=ranks, global_batch_size=4, train_iters=STEPS,
                                  no_shuffle=True, save_weights=save)

    def train(self, name, *flags, ranks=1):
        out, result = self.run_train(name, *flags, ranks=ranks)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return out

    def offload_flags(self, name):
        path = self.tmp / (name + "-nvme")
        path.mkdir()
        return path, ["--offload-optimizer", "nvme", "--offload-path", str(path), "--offload-chunk-mb", str(CHUNK_MB)]

    def assert_same_run(self, offloaded: Path, in_memory: Path):
        """Losses and gradient norms of every step, and the saved weights, bit for bit."""
        def curve(out):
            return [(r["loss"], r["grad_norm"]) for r in read_metrics(out)]
        self.assertEqual(len(curve(offloaded)), STEPS)
        self.assertEqual(curve(offloaded), curve(in_memory))
        saved = in_memory / "model.safetensors"
        if saved.exists():
            self.assertEqual((offloaded / "model.safetensors").read_bytes(), saved.read_bytes())

    def assert_memory(self, memory_json: Path, in_memory_json: Path, master: int, moment: int, shard: int):
        """Measured == planned; master and optimizer states are two chunk slots each, the rest as in memory;
        the file holds the shard's master weights and moments."""
        memory, reference = read_json(memory_json), read_json(in_memory_json)
        self.assertEqual(memory["planned"], memory["measured"])
        chunk = min(CHUNK_ELEMS, shard)
        self.assertEqual(memory["planned"]["master"], 2 * chunk * master)
        self.assertEqual(memory["planned"]["optim"], 2 * 2 * chunk * moment)
        self.assertEqual(reference["planned"]["optim"], 2 * shard * moment)
        for category in ("params", "grads", "activations", "workspace", "comm", "other"):
            self.assertEqual(memory["planned"][category], reference["planned"][category], category)
        self.assertEqual(memory["offloaded_optimizer_file_bytes"], shard * (master + 2 * moment))
        self.assertEqual(reference["offloaded_optimizer_file_bytes"], 0)


class SingleProcess(OffloadTestCase):
    def test_every_mode_is_bitwise_the_in_memory_run(self):
        for name, (flags, master, moment) in MODES.items():
            with self.subTest(name):
                tag = name.replace(" ", "_")
                in_memory = self.train(tag, *flags)
                path, offload = self.offload_flags(tag)
                offloaded = self.train(tag + "-offloaded", *flags, *offload)
                self.assert_same_run(offloaded, in_memory)
                num_params = read_memory(in_memory)["num_params"]
                self.assert_memory(offloaded / "memory.json", in_memory / "memory.json", master, moment, num_params)
                self.assertEqual(list(path.iterdir()), [])  # the state file is removed at the end

    def test_init_from_streams_into_the_file(self):
        source = self.train("source")
        init = ["--init-from", str(source / "model.safetensors"), "--bf16"]
        in_memory = self.train("init", *init)
        _, offload = self.offload_flags("init")
        self.assert_same_run(self.train("init-offloaded", *init, *offload), in_memory)

    def test_deepspeed_config_form(self):
        path = self.tmp / "ds-nvme"
        path.mkdir()
        config = self.tmp / "ds.json"
        config.write_text(json.dumps({"bf16": {"enabled": True}, "zero_optimization": {
            "stage": 0, "offload_optimizer": {"device": "nvme", "nvme_path": str(path)}}}))
        in_memory = self.train("ds-reference", "--bf16")
        offloaded = self.train("ds", "--deepspeed-config", str(config))
        self.assert_same_run(offloaded, in_memory)
        self.assertGreater(read_memory(offloaded)["offloaded_optimizer_file_bytes"], 0)

    def test_a_killed_runs_file_is_taken_over_a_live_runs_refused(self):
        flags, _, _ = MODES["bf16"]
        in_memory = self.train("takeover-reference", *flags)
        path, offload = self.offload_flags("takeover")
        left = path / "memtrain-optimizer.rank0.bin"
        left.write_bytes(b"\x7f" * 4096)  # what a SIGKILLed run leaves: garbage, and no lock held
        self.assert_same_run(self.train("takeover", *flags, *offload), in_memory)
        self.assertFalse(left.exists())
        with open(left, "wb") as held:  # a live run holds the lock on its file
            fcntl.flock(held, fcntl.LOCK_EX)
            out, result = self.run_train("in-use", *flags, *offload)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("in use by another run", result.stderr)
        self.assertFalse(out.exists())

    def test_bad_offload_path_is_one_clear_error_with_nothing_written(self):
        missing = self.tmp / "no-such-dir"
        a_file = self.text
        for path in (missing, a_file):
            with self.subTest(path=path):
                out, result = self.run_train("bad-" + path.name, "--offload-optimizer", "nvme", "--offload-path", str(path))
                self.assertEqual(result.returncode, 1, result.stderr)
                lines = result.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, result.stderr)
                self.assertIn(f"--offload-path {path}", lines[0])
                self.assertFalse(out.exists())
        self.assertFalse(missing.exists())
        out, result = self.run_train("no-path", "--offload-optimizer", "nvme")
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--offload-path", result.stderr)
        self.assertFalse(out.exists())
        for flags, named in ((["--offload-optimizer", "disk"], "--offload-optimizer"),
                             (["--offload-optimizer", "nvme", "--offload-path", str(self.tmp), "--offload-chunk-mb", "0"],
                              "--offload-chunk-mb")):
            out, result = self.run_train("bad-flag", *flags)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(named, result.stderr)
            self.assertFalse(out.exists())


class Mpi(OffloadTestCase):
    def test_sharded_stages_two_ranks_are_bitwise_the_in_memory_run(self):
        for stage, name in (("1", "fp32"), ("1", "bf16 O2 stochastic"), ("2", "bf16 O2 stochastic"), ("3", "fp32")):
            flags, master, moment = MODES[name]
            with self.subTest(stage=stage, mode=name):
                tag = f"dp{stage}-" + name.replace(" ", "_")
                in_memory = self.train(tag, "--zero-stage", stage, *flags, ranks=2)
                path, offload = self.offload_flags(tag)
                offloaded = self.train(tag + "-offloaded", "--zero-stage", stage, *flags, *offload, ranks=2)
                self.assert_same_run(offloaded, in_memory)
                num_params = read_memory(in_memory, 0)["num_params"]
                shard = (num_params + 1) // 2
                for rank in (0, 1):
                    self.assert_memory(offloaded / f"memory.rank{rank}.json", in_memory / f"memory.rank{rank}.json",
                                       master, moment, shard)
                self.assertEqual(list(path.iterdir()), [])

if __name__ == "__main__":
    unittest.main(verbosity=2)
