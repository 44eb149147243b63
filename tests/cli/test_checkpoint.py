"""Checkpoints through the command line: a run of 2n steps equals, bitwise (every logged loss, lr, grad norm and
loss scale, the final weights and optimizer states), n steps then a resume for n more, in every precision and
memory mode; across world sizes within 1e-5; after SIGKILLs at random moments of a save-every-step run; with
corrupt, truncated, missing and foreign files; inspect, export and --verify-resume.

Runs the binary memtrain_cli.py names.
"""
import random
import shutil
import signal
import subprocess
import time
import unittest

from memtrain_cli import ResumeTestCase, command, memtrain, read_metrics, read_json, run_flags

N = ResumeTestCase.N  # steps before the save; runs are 2N steps


class Checkpoint(ResumeTestCase):
    def run_memtrain(self, *args, expect=0):
        result = memtrain(*args)
        if expect is not None:
            self.assertEqual(result.returncode, expect, result.stdout[-3000:] + result.stderr[-3000:])
        return result

    def train_args(self, out, *flags, iters=2 * N):
        return ["train", *run_flags(*flags, data=self.data, out=out, train_iters=iters)]

    def train_command(self, out, *flags, iters=2 * N):
        return command(*self.train_args(out, *flags, iters=iters))

    def offload_dir(self):
        path = self.tmp / "offload"
        path.mkdir(exist_ok=True)
        return path

    def test_resume_is_bitwise_in_every_mode(self):
        modes = {
            "fp32": [],
            "bf16": ["--bf16"],
            "bf16-o2-stochastic": ["--bf16", "--o2-optimizer", "--o2-gradient", "--o2-stochastic-rounding"],
            "bf16-no-master": ["--bf16", "--o2-optimizer", "--o2-gradient", "--no-master-weights"],
            "recompute": ["--recompute-granularity", "full", "--recompute-num-layers", "1"],
            "accumulation": ["--global-batch-size", "6"],
            "offload": ["--bf16", "--offload-optimizer", "nvme", "--offload-path", str(self.offload_dir()),
                        "--offload-chunk-mb", "0.01"],
            "no-shuffle-warmup": ["--no-shuffle", "--lr-warmup-iters", "2"],
        }
        for name, flags in modes.items():
            with self.subTest(mode=name):
                self.assert_bitwise(name, flags)

    def test_fp16_loss_scaler_resumes_with_a_skipped_step_before_the_save(self):
        # A start far too high for fp16 overflows (skips) the first steps; a window of 2 doubles the scale
        # again, so the good-step count and hysteresis matter after the resume.
        flags = ["--fp16", "--initial-loss-scale", "16777216", "--loss-scale-window", "2"]
        straight = self.assert_bitwise("fp16", flags)
        records = self.records(straight)
        self.assertTrue(any(r["skipped"] for r in records[:N]), records)
        self.assertTrue(any(not r["skipped"] for r in records[N:]), records)

    def test_zero_stages_resume_bitwise_on_two_ranks(self):
        offload = ["--offload-optimizer", "nvme", "--offload-path", str(self.offload_dir())]
        fp16 = ["--fp16", "--initial-loss-scale", "16777216", "--loss-scale-window", "2"]
        cases = {"0": ["--bf16"], "1": ["--bf16"], "2": ["--bf16"], "3": ["--bf16"], "1-offload": ["--bf16", *offload],
                 "3-offload": ["--bf16", *offload], "2-fp16": fp16, "3-no-overlap": ["--bf16", "--no-overlap-comm"]}
        for name, flags in cases.items():
            with self.subTest(case=name):
                self.assert_bitwise(f"zero{name}", ["--zero-stage", name[0], "--global-batch-size", "4", *flags],
                                    ranks=2)

    def test_resume_across_world_sizes(self):
        batch = ["--global-batch-size", "4"]
        reference = self.tmp / "world-reference"
        self.train(reference, *batch)
        expected = [r["loss"] for r in self.records(reference)]
        for name, ranks, resume_ranks, stage in (("2to1", 2, 1, "1"), ("1to2", 1, 2, "1"), ("2to1-stage3", 2, 1, "3"),
                                                 ("1to2-stage2", 1, 2, "2")):
            with self.subTest(case=name):
                flags = [*batch, "--zero-stage", stage]
                _, split = self.uninterrupted_and_resumed(name, flags if ranks == 2 else batch, ranks, resume_ranks,
                                                          flags if resume_ranks == 2 else batch)
                losses = [r["loss"] for r in self.records(split)]
                self.assertEqual(len(losses), 2 * N)
                for got, want in zip(losses[N:], expected[N:]):
                    self.assertAlmostEqual(got, want, delta=1e-5 * abs(want))

    def test_sigkill_during_saves_loses_only_unsaved_steps(self):
        iters = 60
        flags = ["--save-interval", "1", "--keep-checkpoints", "3"]
        reference = self.tmp / "kill-reference"
        start = time.monotonic()
        self.train(reference, "--save", str(reference / "ckpt"), *flags, iters=iters)
        duration = time.monotonic() - start
        out = self.tmp / "killed"
        save = out / "ckpt"
        command = self.train_command(out, "--save", str(save), "--resume", "auto", *flags, iters=iters)
        rng = random.Random(7)
        newest, kills = 0, 0
        while kills < 20:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.02, 0.8) * duration)
            if process.poll() is not None:  # finished before the kill: start over from nothing
                shutil.rmtree(out)
                newest = 0
                continue
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
            result = self.run_memtrain("inspect", str(save), expect=None)
            if result.returncode != 0:  # killed before the first save completed (or created the directory)
                self.assertEqual(newest, 0, result.stderr)
                self.assertRegex(result.stderr, "no checkpoint that verifies|the path does not exist")
                continue
            step = int(result.stdout.split(": step ")[1].split(",")[0])
            self.assertGreaterEqual(step, newest)  # a kill never destroys the last complete save
            newest = step
        self.assertEqual(kills, 20)
        # A kill between a save's rename and the pruning of old checkpoints leaves one extra; the next
        # completed save prunes it, or, where that was the last step's save, the run that finds it complete.
        self.assertLessEqual(len(list(save.glob("step_*"))), 4)
        finished = subprocess.run(command, capture_output=True, text=True, timeout=120)
        self.assertEqual(finished.returncode, 0, finished.stderr)
        self.assertEqual(len(list(save.glob("step_*"))), 3)  # --keep-checkpoints 3
        self.assertEqual(self.records(out), self.records(reference))
        final = f"ckpt/step_{iters:08d}/rank0.safetensors"
        self.assertEqual((out / final).read_bytes(), (reference / final).read_bytes())

    def test_a_requeued_complete_run_finishes_its_last_saves_pruning(self):
        # As a kill between the last save's rename and its pruning leaves the save directory.
        out = self.tmp / "requeued"
        save = out / "ckpt"
        self.run_memtrain(*self.train_args(out, "--save", str(save), "--save-interval", "1", iters=4))
        unfinished = save / ".step_00000004.tmp"
        unfinished.mkdir()
        (unfinished / "rank0.safetensors").write_bytes(b"half")
        result = self.run_memtrain(*self.train_args(out, "--save", str(save), "--resume", "auto",
                                                    "--save-interval", "1", "--keep-checkpoints", "3", iters=4))
        self.assertIn("the run is complete", result.stdout)
        self.assertEqual(sorted(p.name for p in save.iterdir() if p.name != ".memtrain.lock"),
                         ["step_00000002", "step_00000003", "step_00000004"])

    def test_sigterm_finishes_the_step_saves_and_exits_0(self):
        out = self.tmp / "sigterm"
        command = self.train_command(out, "--save", str(out / "ckpt"), iters=1000000)
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        metrics = out / "metrics.jsonl"
        deadline = time.monotonic() + 60
        while (not metrics.exists() or len(metrics.read_text().splitlines()) < 5) and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 0, stderr)
        self.assertIn("stopping on a signal", stdout)
        last = self.records(out)[-1]["step"]
        self.assertTrue((out / "ckpt" / f"step_{last:08d}" / "manifest.json").exists())

    def corrupted_copy(self, source, name, damage):
        target = self.tmp / f"corrupt-{name}"
        shutil.copytree(source, target)
        damage(target / f"step_{2 * N:08d}")
        return target

    def test_corrupt_checkpoints_are_named_or_skipped(self):
        good = self.tmp / "corruption"
        self.train(good, "--save", str(good / "ckpt"), "--save-interval", str(N))
        other = self.tmp / "corruption-other-run"
        self.train(other, "--save", str(other / "ckpt"), "--save-interval", str(N), "--seed", "99")
        newest = f"step_{2 * N:08d}"

        def flip(path):
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0x40
            path.write_bytes(bytes(data))

        def truncate(path):
            path.write_bytes(path.read_bytes()[:-100])

        cases = {
            "flipped": (lambda d: flip(d / "rank0.safetensors"), "rank0.safetensors"),
            "truncated": (lambda d: truncate(d / "model.safetensors"), "model.safetensors"),
            "missing": (lambda d: (d / "state.json").unlink(), "state.json"),
            "foreign-manifest": (lambda d: shutil.copy(other / "ckpt" / newest / "manifest.json", d),
                                 "another checkpoint"),
            "partial": (lambda d: (d / "manifest.json").unlink(), "partial checkpoint"),
        }
        for name, (damage, named) in cases.items():
            with self.subTest(case=name):
                save = self.corrupted_copy(good / "ckpt", name, damage)
                loaded = self.train(self.tmp / f"load-{name}", "--load", str(save / newest), expect=1)
                self.assertIn(named, loaded.stderr)
                self.assertEqual(len(loaded.stderr.strip().splitlines()), 1, loaded.stderr)
                self.assertIn(newest, loaded.stderr)
                inspected = self.run_memtrain("inspect", str(save / newest), expect=1)
                self.assertIn(named, inspected.stderr)
                # A save directory: the bad checkpoint is reported and the previous one is used.
                out = self.tmp / f"auto-{name}"
                resumed = self.train(out, "--save", str(save), "--resume", "auto")
                self.assertIn("skipping checkpoint", resumed.stderr)
                self.assertIn(f"resumed from {save}/step_{N:08d}", resumed.stdout)
                self.assertEqual(self.records(out), self.records(good)[N:])

    def test_inspect_and_export(self):
        run = self.tmp / "export"
        # Evaluated at the last step: the validation loss of the weights that step saves.
        self.train(run, "--save", str(run / "ckpt"), "--eval-interval", str(2 * N), "--eval-iters", "2")
        inspected = self.run_memtrain("inspect", str(run / "ckpt"))
        for expected in ("step 6", "checksums verified", "rank0.safetensors", "model.safetensors", "state.json",
                         "wte.weight", "h.1.mlp.c_proj.weight", "F32", "[256, 64]", "optimizer updates 6"):
            self.assertIn(expected, inspected.stdout)
        model = self.tmp / "exported"
        self.run_memtrain("export", str(run / "ckpt"), "--out", str(model))
        config = read_json(model / "config.json")
        self.assertEqual((config["n_layer"], config["n_embd"], config["vocab_size"]), (2, 64, 256))
        # The exported weights, loaded back and left unchanged by a step at lr 0, give the same eval loss.
        check = self.tmp / "export-check"
        self.train(check, "--model", str(model / "config.json"), "--init-from", str(model / "model.safetensors"),
                   "--lr", "0", "--min-lr", "0", "--eval-interval", "1", "--eval-iters", "2", iters=1)
        want = read_metrics(run)[-1]["val_loss"]
        got = read_metrics(check)[-1]["val_loss"]
        self.assertEqual(got, want)

    def test_verify_resume_prints_a_passing_verdict(self):
        out = self.tmp / "verify"
        result = self.train(out, "--verify-resume", str(N), "--bf16", "--o2-optimizer", "--o2-stochastic-rounding")
        self.assertIn(f"verify-resume: PASS: saved after step {N}", result.stdout)
        self.assertIn(f"{N}/{N} losses bitwise equal", result.stdout)

    def test_resume_checks_settings_and_flags(self):
        run = self.tmp / "settings"
        self.train(run, "--save", str(run / "ckpt"), iters=2)
        changed = self.train(self.tmp / "settings-lr", "--load", str(run / "ckpt"), "--lr", "0.001", expect=2)
        self.assertIn("--lr", changed.stderr)
        precision = self.train(self.tmp / "settings-bf16", "--load", str(run / "ckpt"), "--bf16", expect=2)
        self.assertIn("--precision", precision.stderr)
        for flags, named in ((["--resume", "sometimes", "--save", "x"], "--resume"),
                             (["--exit-interval", "2"], "--exit-interval"),
                             (["--resume", "auto"], "--save"),
                             (["--verify-resume", "6"], "--verify-resume")):
            with self.subTest(flags=flags):
                result = self.train(self.tmp / "bad-flags", *flags, expect=2)
                self.assertIn(named, result.stderr)
                self.assertFalse((self.tmp / "bad-flags").exists())
        # The step count stays the total: resuming at step 2 with --train-iters 4 runs steps 3 and 4.
        resumed = self.train(run, "--save", str(run / "ckpt"), "--resume", "auto", iters=4)
        self.assertIn("resumed from", resumed.stdout)
        self.assertEqual([r["step"] for r in self.records(run)], [1, 2, 3, 4])


if __name__ == "__main__":
    unittest.main(verbosity=2)
