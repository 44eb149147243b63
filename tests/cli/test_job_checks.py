"""The ranks of one mpirun job agree before step 1 (src/train/job_agreement.h): ranks given different flags
(`mpirun -np 1 memtrain ... : -np 1 memtrain ...`) are refused by name, before anything is written and without
hanging, however the flags differ (a learning rate, --train-iters, tensor-parallel sizes); a flag error is
printed once per job (before the communicator exists too, when every rank runs one command line), or by the one rank that has it, naming that rank and its host; paths and data that a rank
does not share with rank 0 (a relative path under another working directory) are refused before step 1; the
banner shows the layout; --distributed-timeout-minutes is a flag like any other, and a stopped pipeline stage
ends the job within it.

Runs the binary memtrain_cli.py names.
"""
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest
from pathlib import Path

from memtrain_cli import MEMTRAIN, CliTestCase, memtrain, mpirun, run_flags, sample_text

MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


class JobChecks(CliTestCase):
    def two_ranks(self, first: dict, second: dict) -> subprocess.CompletedProcess:
        """Rank 0 with TINY_RUN changed by `first`, rank 1 by `second`, both on this class's data into one --out."""
        common = {"data": self.data, "out": self.tmp / "run", "zero_stage": 1}
        ranks = [["-np", "1", MEMTRAIN, "train", *run_flags(**{**common, **flags})] for flags in (first, second)]
        return subprocess.run([*MPI, *ranks[0], ":", *ranks[1]], capture_output=True, text=True, timeout=120)

    def assert_one_error(self, result, exit_code, *mentions):
        """One `memtrain: error:` line in the job's output, naming each of mentions; the job's exit code."""
        context = f"\nexit code {result.returncode}\nstdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr}"
        errors = [line for line in result.stderr.splitlines() if line.startswith("memtrain: error: ")]
        self.assertEqual(len(errors), 1, "expected one error line for the job" + context)
        for mention in mentions:
            self.assertIn(mention, errors[0], context)
        self.assertEqual(result.returncode, exit_code, context)
        return errors[0]

    def test_ranks_given_different_flags_are_refused_by_name_before_anything_is_written(self):
        for flag, value, mentions in (
                ("lr", 0.001, ["--lr differs on rank 1 from rank 0's"]),
                ("seed", 7, ["--seed differs on rank 1"]),
                ("train_iters", 3, ["--train-iters differs on rank 1"]),
                ("tensor_model_parallel_size", 2, ["--tensor-model-parallel-size differs on rank 1"]),
                ("distributed_timeout_minutes", 1, ["--distributed-timeout-minutes differs on rank 1"])):
            with self.subTest(flag=flag):
                result = self.two_ranks({}, {flag: value})
                line = self.assert_one_error(result, 2, *mentions)
                self.assertIn("every rank needs the same flags (all but --device, --threads)", line)
                self.assertFalse((self.tmp / "run").exists(), "a refused job wrote its --out")

    def test_a_per_rank_flag_may_differ(self):
        result = self.two_ranks({"threads": 1}, {"threads": 2})
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_ranks_given_different_models_are_refused(self):
        result = self.two_ranks({}, {"model": "llama-tiny"})
        self.assert_one_error(result, 2, "--model differs on rank 1")

    def test_a_flag_error_every_rank_sees_is_printed_once(self):
        result = subprocess.run([*mpirun(2), MEMTRAIN, "train", *run_flags(
            data=self.data, out=self.tmp / "run", tensor_model_parallel_size=3)],
            capture_output=True, text=True, timeout=120)
        line = self.assert_one_error(result, 2, "--tensor-model-parallel-size 3", "does not divide")
        self.assertNotIn("rank ", line.split("error: ")[1][:5])

    def test_a_command_line_error_every_rank_sees_is_printed_once(self):
        """Before the communicator exists: an unknown flag (CLI11's parse) and contradicting flags (resolving
        them into a configuration), each the same on every rank of one command line."""
        for words, mention in ((["--no-such-flag"], "--no-such-flag"),
                               (["--bf16", "--fp16"], "--bf16 and --fp16 exclude each other")):
            with self.subTest(words=words):
                result = subprocess.run([*mpirun(2), MEMTRAIN, "train", *run_flags(
                    *words, data=self.data, out=self.tmp / "run")], capture_output=True, text=True, timeout=120)
                self.assert_one_error(result, 2, mention)

    def test_a_command_line_error_of_one_command_line_of_two_is_printed(self):
        """`mpirun A : B`: rank 0 cannot speak for rank 1's command line, so rank 1 prints its own error."""
        ranks = [["-np", "1", MEMTRAIN, "train", *run_flags(*words, data=self.data, out=self.tmp / "run")]
                 for words in ([], ["--bf16", "--fp16"])]
        result = subprocess.run([*MPI, *ranks[0], ":", *ranks[1]], capture_output=True, text=True, timeout=120)
        self.assertNotEqual(result.returncode, 0, result.stderr)
        self.assertIn("memtrain: error: --bf16 and --fp16 exclude each other", result.stderr)

    def test_a_flag_error_one_rank_sees_is_printed_by_that_rank_naming_its_host(self):
        result = self.two_ranks({}, {"tensor_model_parallel_size": 3})
        self.assert_one_error(result, 2, f"rank 1 on {socket.gethostname()}: ", "--tensor-model-parallel-size 3")

    def test_the_banner_shows_the_world_and_its_layout(self):
        result = subprocess.run([*mpirun(2), MEMTRAIN, "train", *run_flags(
            data=self.data, out=self.tmp / "run", zero_stage=1)], capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("world 2 ranks = tensor 1 x pipeline 1 x data 2 | ZeRO stage 1\n", result.stdout)
        self.assert_no_check_files(self.tmp / "run")
        single = self.train(expect=0)
        self.assertNotIn("world ", single.stdout)

    def hosts_apart(self, other_text=None, **flags) -> subprocess.CompletedProcess:
        """Two ranks with the same flags run in folders a/ and b/ (mpirun -wdir), so that a relative path names
        a different folder on each, as on two hosts without a shared file system. Each folder has its data in
        data/: this class's, or in b/ the byte tokens of `other_text`."""
        shutil.copytree(self.data, self.tmp / "a" / "data")
        if other_text is None:
            shutil.copytree(self.data, self.tmp / "b" / "data")
        else:
            (self.tmp / "b").mkdir()
            text = self.tmp / "other.txt"
            text.write_text(other_text)
            prepared = memtrain("prepare", text, "--tokenizer", "byte", "--out", self.tmp / "b" / "data")
            self.assertEqual(prepared.returncode, 0, prepared.stderr)
        words = run_flags(**{"data": "data", "zero_stage": 1, **flags})
        ranks = [["-np", "1", "-wdir", self.tmp / host, MEMTRAIN, "train", *words] for host in ("a", "b")]
        return subprocess.run(list(map(str, [*MPI, *ranks[0], ":", *ranks[1]])), capture_output=True, text=True,
                              timeout=120)

    def assert_no_check_files(self, folder: Path):
        self.assertEqual(list(folder.glob(".memtrain-shared-check-*")), [], f"check files left in {folder}")

    def test_a_save_only_rank_0_sees_is_refused_before_step_1(self):
        out = self.tmp / "out"
        result = self.hosts_apart(out=out, save="checkpoints")
        self.assert_one_error(result, 1, f"rank 1 on {socket.gethostname()}: --save checkpoints: ",
                              "does not see .memtrain-shared-check-", "a file system every host shares")
        self.assertNotIn("step 1", result.stdout)
        self.assertFalse(out.exists(), "a refused job left its --out")
        self.assertFalse((self.tmp / "a" / "checkpoints").exists(), "a refused job left its --save")

    def test_an_out_only_rank_0_sees_is_refused(self):
        result = self.hosts_apart(out="run")
        self.assert_one_error(result, 1, "rank 1 on", "--out run: this rank does not see")

    def test_data_that_differs_between_hosts_is_refused(self):
        result = self.hosts_apart(other_text=sample_text(3000), out=self.tmp / "out")
        self.assert_one_error(result, 1, "rank 1 on", "--data data: this rank sees other shards than rank 0")

    def test_a_stopped_pipeline_stage_ends_the_job_within_the_timeout(self):
        out = self.tmp / "stopped"
        words = run_flags(data=self.data, out=out, train_iters=100000, global_batch_size=8,
                          pipeline_model_parallel_size=2, distributed_timeout_minutes=0.05)
        job = subprocess.Popen([*mpirun(2), MEMTRAIN, "train", *map(str, words)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
                self.assertLess(time.monotonic(), deadline, "no step within 60 s")
                time.sleep(0.2)
            ranks = [int(p) for p in os.listdir("/proc") if p.isdigit() and self.runs_into(int(p), out)]
            self.assertEqual(len(ranks), 2)
            os.kill(max(ranks), signal.SIGSTOP)
            stopped = time.monotonic()
            _, err = job.communicate(timeout=60)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.communicate()
        self.assertNotEqual(job.returncode, 0, err)
        self.assertLess(time.monotonic() - stopped, 30, err)
        lines = [line for line in err.splitlines() if line.startswith("memtrain: error: ")]
        self.assertTrue(lines, err)
        for line in lines:
            # The stages exchange activations (send_recv) and sum the step's loss and norm (all_reduce_sum, and
            # all_gather for the sums in rank order): which one waits depends on where the stage stopped.
            self.assertRegex(line, r"^memtrain: error: (send_recv|all_reduce_sum|all_gather): world rank [01] on "
                                   r"\S+ waited longer than --distributed-timeout-minutes 0.05 for world rank [01] \(",
                             err)

    @staticmethod
    def runs_into(pid: int, out) -> bool:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                words = cmdline.read().split(b"\0")
        except OSError:
            return False
        return words[0] == MEMTRAIN.encode() and str(out).encode() in words

    def test_distributed_timeout_bounds(self):
        for bad in ("-1", "nan", "ten"):
            with self.subTest(value=bad):
                self.assert_error(self.train("--distributed-timeout-minutes", bad), 2,
                                  "--distributed-timeout-minutes")
        self.train("--distributed-timeout-minutes", "0.5", expect=0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
