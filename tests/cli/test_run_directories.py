"""Where a run writes, through the command line: --out and --save locked against a second run (also under
mpirun), a fresh run refused where it would overwrite another run's checkpoints, pruning only within a run's
own lineage, every output path checked before step 1, an idempotent requeue, and a failed metrics write that
saves and stops instead of losing the run. The full-disk and read-only cases mount a small tmpfs, so they need
root; they skip with a message otherwise.

Runs the binary memtrain_cli.py names.
"""
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
import unittest
from pathlib import Path

from memtrain_cli import CliTestCase, command, memtrain, read_metrics, run_flags

LOCK = ".memtrain.lock"


def checkpoints(save: Path) -> list:
    return sorted(p.name for p in save.glob("step_*"))


def step_name(step: int) -> str:
    return f"step_{step:08d}"


@contextlib.contextmanager
def lock_held(directory: Path, pid: str):
    """directory's lock, held as a live run holds it (with `pid` in the file) until the block ends."""
    directory.mkdir()
    with open(directory / LOCK, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write(pid)
        held.flush()
        yield


class RunDirCase(CliTestCase):
    def train_in(self, out, *words, expect=0, ranks=1, **flags):
        return self.train(*words, out=out, ranks=ranks, expect=expect, **flags)

    def mount_tmpfs(self, path: Path, options: str) -> Path:
        """A tmpfs at path (created), unmounted at the end of the test; skips the test unless root can mount."""
        if os.geteuid() != 0:
            self.skipTest("needs root to mount a small tmpfs (a full or read-only file system)")
        path.mkdir(parents=True, exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True,
                                 text=True)
        if mounted.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
        self.addCleanup(subprocess.run, ["umount", "-l", str(path)], check=False)
        return path


class Locking(RunDirCase):
    def test_a_second_run_on_the_same_save_is_refused_and_the_first_keeps_its_checkpoints(self):
        first_out, save = self.tmp / "first", self.tmp / "ckpt"
        first_command = command("train", *run_flags(data=self.data, out=first_out, save=save, save_interval=20,
                                                    keep_checkpoints=2, train_iters=1000000))
        first = subprocess.Popen(first_command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addCleanup(first.kill)
        deadline = time.monotonic() + 120
        while not (save / step_name(20) / "manifest.json").exists() and time.monotonic() < deadline:
            self.assertIsNone(first.poll(), "the first run ended early")
            time.sleep(0.05)
        for name, flags in (("resume", {"resume": "auto"}), ("fresh", {})):
            with self.subTest(second=name):
                second = self.train_in(self.tmp / f"second-{name}", save=save, train_iters=3, expect=None, **flags)
                self.assert_error(second, 1, f"--save {save}", f"pid {first.pid}")
                self.assertFalse((self.tmp / f"second-{name}").exists())
        same_out = self.train_in(first_out, train_iters=3, expect=None)
        self.assert_error(same_out, 1, f"--out {first_out}", f"pid {first.pid}")
        first.send_signal(signal.SIGTERM)
        _, stderr = first.communicate(timeout=120)
        self.assertEqual(first.returncode, 0, stderr)
        steps = [r["step"] for r in read_metrics(first_out)]
        self.assertEqual(steps, list(range(1, len(steps) + 1)))  # one run's lines, none torn or interleaved
        last = steps[-1]
        kept = checkpoints(save)
        self.assertEqual(kept[-1], step_name(last))
        self.assertLessEqual(len(kept), 2)
        for name in kept:
            inspected = memtrain("inspect", save / name)
            self.assertEqual(inspected.returncode, 0, inspected.stderr)
        resumed = self.train_in(first_out, save=save, resume="auto", train_iters=last + 1)
        self.assertIn(f"resumed from {save}/{step_name(last)}", resumed.stdout)

    def test_a_lock_held_by_a_live_process_names_its_pid_and_a_dead_ones_is_taken_over(self):
        save = self.tmp / "held"
        with lock_held(save, "4242"):
            self.assert_error(self.train_in(self.tmp / "run", save=save, expect=None), 1, f"--save {save}",
                              "pid 4242", "in use")
        # Closed, as a killed process's is: the file stays, the lock does not.
        self.train_in(self.tmp / "run", save=save)
        self.assertEqual(checkpoints(save), [step_name(2)])

    def test_a_held_lock_under_mpirun_is_refused_once_for_the_job(self):
        save = self.tmp / "held-mpi"
        with lock_held(save, "4343"):
            result = self.train_in(self.tmp / "run", save=save, global_batch_size=4, ranks=2, expect=None,
                                   timeout=120)
        self.assertNotEqual(result.returncode, 0, result.stderr)
        errors = [line for line in result.stderr.splitlines() if line.startswith("memtrain: error: ")]
        self.assertEqual(len(errors), 1, result.stderr)  # rank 0's reason; rank 1 exits with it, silently
        self.assertIn(f"--save {save}", errors[0])
        self.assertIn("pid 4343", errors[0])
        self.assertFalse((self.tmp / "run").exists())

    def test_save_equal_to_out_takes_one_lock(self):
        out = self.tmp / "same"
        self.train_in(out, save=out)
        self.assertEqual(checkpoints(out), [step_name(2)])
        self.assertTrue((out / "metrics.jsonl").exists())


class FreshRuns(RunDirCase):
    def test_a_fresh_run_into_a_used_save_is_refused_unless_told_to_overwrite(self):
        # The reproduction: an earlier run's checkpoints, then a fresh run pruning to 2.
        save = self.tmp / "ckpt"
        self.train_in(self.tmp / "earlier", "--seed", "1", save=save, save_interval=2, train_iters=6)
        earlier = {name: (save / name / "manifest.json").read_bytes() for name in checkpoints(save)}
        self.assertEqual(sorted(earlier), [step_name(2), step_name(4), step_name(6)])
        refused = self.train_in(self.tmp / "fresh", "--seed", "2", save=save, save_interval=1, keep_checkpoints=2,
                                exit_interval=2, expect=None)
        self.assert_error(refused, 1, f"--save {save}", step_name(6), "--resume auto", "--overwrite-checkpoints")
        self.assertEqual({name: (save / name / "manifest.json").read_bytes() for name in checkpoints(save)}, earlier)
        self.assertFalse((self.tmp / "fresh").exists())
        over = self.train_in(self.tmp / "fresh", "--seed", "2", "--overwrite-checkpoints", save=save,
                             save_interval=1, keep_checkpoints=2, exit_interval=2, train_iters=6)
        self.assertIn("removed 3 checkpoints", over.stdout)
        self.assertEqual(checkpoints(save), [step_name(1), step_name(2)])
        # A requeue continues the new run, not the removed one.
        resumed = self.train_in(self.tmp / "fresh", save=save, resume="auto", seed=2, train_iters=6)
        self.assertIn(f"resumed from {save}/{step_name(2)}", resumed.stdout)

    def test_overwrite_checkpoints_flag_rules(self):
        for flags, named in (({}, "--save"), ({"save": self.tmp / "s", "resume": "auto"}, "--resume auto")):
            with self.subTest(flags=flags):
                result = self.train_in(self.tmp / "bad", "--overwrite-checkpoints", expect=None, **flags)
                self.assert_error(result, 2, "--overwrite-checkpoints", named)
                self.assertFalse((self.tmp / "bad").exists())

    def test_pruning_keeps_other_lineages(self):
        own, shared = self.tmp / "own", self.tmp / "shared"
        self.train_in(self.tmp / "a", save=own, save_interval=2, train_iters=4)
        self.train_in(self.tmp / "b", "--seed", "5", save=shared, train_iters=2)  # another run's step_2
        foreign = (shared / step_name(2) / "manifest.json").read_bytes()
        half_removed = shared / f".{step_name(3)}.del"  # what a kill during a removal leaves
        half_removed.mkdir()
        (half_removed / "rank0.safetensors").write_bytes(b"\0" * 64)
        # Continuing run a in the shared directory, keeping 1: a's older saves go, b's step_2 stays.
        self.train_in(self.tmp / "a", "--load", own / step_name(4), save=shared, save_interval=1,
                      keep_checkpoints=1, train_iters=7)
        self.assertEqual(checkpoints(shared), [step_name(2), step_name(7)])
        self.assertFalse(half_removed.exists())
        self.assertEqual((shared / step_name(2) / "manifest.json").read_bytes(), foreign)
        ids = {json.loads((shared / name / "state.json").read_text())["run_id"] for name in checkpoints(shared)}
        self.assertEqual(len(ids), 2)
        self.assertEqual(json.loads((own / step_name(4) / "state.json").read_text())["run_id"],
                         json.loads((shared / step_name(7) / "state.json").read_text())["run_id"])

    def test_a_fresh_run_in_a_used_out_keeps_the_earlier_metrics(self):
        out = self.tmp / "run"
        self.train_in(out, train_iters=3)
        earlier = (out / "metrics.jsonl").read_text()
        second = self.train_in(out, train_iters=2)
        self.assertIn("metrics.1.jsonl", second.stdout)
        self.assertEqual((out / "metrics.1.jsonl").read_text(), earlier)
        self.assertEqual([r["step"] for r in read_metrics(out)], [1, 2])
        self.train_in(out, train_iters=1)
        self.assertTrue((out / "metrics.2.jsonl").exists())


class OutputPaths(RunDirCase):
    def assert_refused_before_step_1(self, out, flags, *mentions):
        result = self.train_in(out, expect=None, **flags)
        self.assert_error(result, 1, *mentions)
        self.assertNotIn("step     1", result.stdout)
        self.assertFalse((out / "metrics.jsonl").exists())
        return result

    def test_every_output_path_is_checked_before_step_1(self):
        a_file = self.tmp / "a-file"
        a_file.write_text("not a directory")
        a_dir = self.tmp / "a-dir"
        a_dir.mkdir()
        missing = self.tmp / "no-such-dir"
        cases = {
            "save is a file": ({"save": a_file}, "--save", "a directory is expected"),
            "save under a file": ({"save": a_file / "ckpt"}, "--save", a_file / "ckpt"),
            "out is a file": ({"out": a_file}, "--out", "a directory is expected"),
            "save-weights is a directory": ({"save_weights": a_dir}, "--save-weights", "a file is expected"),
            "save-weights without its directory": ({"save_weights": missing / "w.safetensors"}, "--save-weights",
                                                   "does not exist"),
            "memory-timeline without its directory": ({"memory_timeline": missing / "t.json"},
                                                      "--memory-timeline", "does not exist"),
            "offload-path missing": ({"offload_optimizer": "nvme", "offload_path": missing}, "--offload-path",
                                     "not an existing directory"),
        }
        for name, (flags, flag, what) in cases.items():
            with self.subTest(case=name):
                out = flags.pop("out", self.tmp / "run")
                self.assert_refused_before_step_1(out, flags, flag, what)
                if out != a_file:
                    self.assertFalse(out.exists(), "a refused run left its --out")
        self.assertFalse(missing.exists())

    def test_a_read_only_save_is_refused_before_step_1(self):
        read_only = self.mount_tmpfs(self.tmp / "ro", "ro,size=64k")
        for flags, flag in (({"save": read_only}, "--save"), ({"save": read_only / "ckpt"}, "--save"),
                            ({"save_weights": read_only / "w.safetensors"}, "--save-weights")):
            with self.subTest(flags=flags):
                self.assert_refused_before_step_1(self.tmp / "run", flags, flag, "Read-only file system")

    def test_a_save_short_of_space_for_one_checkpoint_is_warned_about_before_step_1(self):
        small = self.mount_tmpfs(self.tmp / "small", "size=64k")
        # stdout and stderr as one stream, to see that the warning comes before step 1.
        result = subprocess.run(command("train", *run_flags(data=self.data, out=self.tmp / "run", save=small,
                                                            train_iters=1)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        warning = [line for line in result.stdout.splitlines() if line.startswith("memtrain: warning: ")]
        self.assertEqual(len(warning), 1, result.stdout)
        self.assertIn(f"--save {small}", warning[0])
        self.assertIn("less than one checkpoint", warning[0])
        self.assertLess(result.stdout.find("less than one"), result.stdout.find("step     1"))
        self.assertEqual(result.returncode, 1, result.stdout)  # and the save then finds the disk full
        self.assertEqual(checkpoints(small), [])


class Requeue(RunDirCase):
    ITERS, INTERVAL = 8, 3

    def records(self, out):
        return [{k: r[k] for k in ("step", "loss", "lr", "grad_norm")} for r in read_metrics(out)]

    def test_four_requeued_runs_end_with_exit_0_and_the_uninterrupted_losses(self):
        straight = self.tmp / "straight"
        self.train_in(straight, save=straight / "ckpt", train_iters=self.ITERS)
        out = self.tmp / "requeued"
        flags = dict(save=out / "ckpt", resume="auto", exit_interval=self.INTERVAL, train_iters=self.ITERS,
                     save_weights=out / "model.safetensors")
        outputs = []
        for attempt in range(4):
            outputs.append(self.train_in(out, **flags).stdout)
            if attempt == 2:
                finished = {name: (out / name).read_bytes() for name in ("memory.json", "metrics.jsonl")}
                (out / "model.safetensors").unlink()  # as if killed after the last save, before --save-weights
        self.assertIn("--exit-interval reached after step 3", outputs[0])
        self.assertIn("--exit-interval reached after step 6", outputs[1])
        self.assertIn("the run is complete", outputs[3])
        self.assertIn("wrote --save-weights", outputs[3])
        self.assertEqual({name: (out / name).read_bytes() for name in finished}, finished)
        self.assertEqual(self.records(out), self.records(straight))
        self.assertGreater((out / "model.safetensors").stat().st_size, 0)
        again = self.train_in(out, **flags)
        self.assertIn("the run is complete", again.stdout)
        self.assertNotIn("wrote --save-weights", again.stdout)

    def test_requeue_of_a_finished_run_under_mpirun_exits_0(self):
        out = self.tmp / "mpi"
        flags = dict(save=out / "ckpt", resume="auto", global_batch_size=4, train_iters=2, ranks=2)
        self.train_in(out, **flags)
        finished = (out / "memory.rank0.json").read_bytes()
        again = self.train_in(out, **flags)
        self.assertIn("the run is complete", again.stdout)
        self.assertEqual((out / "memory.rank0.json").read_bytes(), finished)

class LogFailures(RunDirCase):
    def test_a_full_out_saves_a_checkpoint_then_stops_with_one_line(self):
        # Two pages: one for the lock file, one for metrics.jsonl (about twenty lines).
        out = self.mount_tmpfs(self.tmp / "full", "size=8k")
        save = self.tmp / "ckpt"
        result = self.train_in(out, save=save, train_iters=200, expect=None)
        self.assert_error(result, 1, out / "metrics.jsonl", "No space left on device", "saved checkpoint")
        lines = (out / "metrics.jsonl").read_text().splitlines()
        steps = [json.loads(line)["step"] for line in lines]  # whole lines only
        self.assertEqual(steps, list(range(1, len(steps) + 1)))
        failed_at = int(result.stderr.split(" at step ")[1].split(";")[0])
        self.assertEqual(failed_at, steps[-1] + 1)
        self.assertEqual(checkpoints(save), [step_name(failed_at)])
        self.assertEqual(memtrain("inspect", save).returncode, 0)
        self.assertFalse((out / "memory.json").exists())

    def test_a_torn_last_line_is_skipped_on_resume_and_by_report(self):
        straight = self.tmp / "straight"
        self.train_in(straight, train_iters=4)
        out = self.tmp / "torn"
        self.train_in(out, "--memory-timeline", save=out / "ckpt", exit_interval=2, train_iters=4)
        with open(out / "metrics.jsonl", "a") as metrics:
            metrics.write('{"step": 3, "loss": 5.')  # a write cut short
        report = memtrain("report", out)
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertIn("skipped its torn last line 3", report.stdout)
        resumed = self.train_in(out, save=out / "ckpt", resume="auto", train_iters=4)
        self.assertIn("skipped its torn last line 3", resumed.stdout)
        self.assertEqual([(r["step"], r["loss"]) for r in read_metrics(out)],
                         [(r["step"], r["loss"]) for r in read_metrics(straight)])
        # A bad line before the last is corruption: named, not skipped.
        lines = (out / "metrics.jsonl").read_text().splitlines()
        (out / "metrics.jsonl").write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
        self.assert_error(memtrain("report", out), 1, "metrics.jsonl:2")


if __name__ == "__main__":
    unittest.main(verbosity=2)
