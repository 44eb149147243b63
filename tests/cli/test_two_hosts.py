"""Two hosts on one machine: network namespaces A and B joined by a veth pair, Open MPI over TCP between them
(mpirun runs in A; an rsh agent starts B's daemon with `ip netns exec B`, in a UTS namespace of its own so
that B has its own host name). Data parallelism across the two "hosts" repeats one host's losses bitwise; a
link taken down mid-run ends every rank within --distributed-timeout-minutes, with the timeout's line; a --save
that B does not share (a tmpfs mounted over it in B's mount namespace) is refused before step 1, naming B.

After the ranks have ended, Open MPI's mpirun still waits for its daemon on the lost host (its TCP connection
holds the kill order unacknowledged): that launcher is killed here once every rank is gone. With Open MPI's
out-of-band keepalive shorter than the timeout (as the README says to launch), mpirun notices the lost host
itself and the whole job ends within the timeout, with Open MPI's message.

Needs root and `ip netns` (iproute2), `unshare` (util-linux), Open MPI: without them it exits 77, which CTest
reports as skipped (SKIP_RETURN_CODE), printing why.

Runs the binary memtrain_cli.py names.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

from memtrain_cli import MEMTRAIN, CliTestCase, read_metrics, run_flags

SKIPPED = 77
TAG = f"mt{os.getpid() % 100000}"  # namespaces and links of this test process only: CI runs tests in parallel
NS_A, NS_B = TAG + "a", TAG + "b"
SUBNET = f"10.{200 + os.getpid() % 50}.{os.getpid() // 50 % 250}"
IP_A, IP_B = SUBNET + ".1", SUBNET + ".2"
HOST_B = "memtrain-host-b"
TIMEOUT_MINUTES = 0.1  # 6 s: the link test's limit
MARGIN_S = 30  # past that limit: starting the abort, and a slow (sanitizer) build
# Open MPI's keepalive on its launcher's connections: idle 2 s, then 2 probes 1 s apart, 4 s < the timeout.
KEEPALIVE = ["--mca", "oob_tcp_keepalive_time", "2", "--mca", "oob_tcp_keepalive_intvl", "1",
             "--mca", "oob_tcp_keepalive_probes", "2"]


def why_not_runnable() -> str:
    """Empty when this machine can run the test, else the reason."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "unshare", "mpirun"):
        if shutil.which(tool) is None:
            return f"needs {tool} (iproute2, util-linux, openmpi-bin: scripts/setup.sh installs them)"
    probe = subprocess.run(["ip", "netns", "add", TAG + "probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns add` failed: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", TAG + "probe"], capture_output=True)
    return ""


def sh(*args):
    subprocess.run(list(map(str, args)), check=True, capture_output=True, text=True)


def processes_naming(word: str, program=b"") -> list:
    """The pids of processes (on either host: namespaces share the process table) whose command line has
    `word` as one argument, or inside one, and whose program name ends with `program`."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            words = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if words[0].endswith(program) and any(word.encode() in w for w in words[1:]):
            pids.append(int(proc.name))
    return pids


def ranks_running(out: Path) -> list:
    return processes_naming(str(out), b"memtrain")


def kill_leftovers(agent: Path):
    """B's Open MPI daemon (it outlives an mpirun killed after a lost link), anything it started, and anything
    still naming the agent; returns once they are gone, so that the next job starts on a quiet host."""
    namespace_b = subprocess.run(["ip", "netns", "pids", NS_B], capture_output=True, text=True).stdout.split()
    leftovers = set(map(int, namespace_b)) | set(processes_naming(str(agent)))
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in leftovers) and time.monotonic() < deadline:
        time.sleep(0.05)


def set_up_hosts():
    sh("ip", "netns", "add", NS_A)
    sh("ip", "netns", "add", NS_B)
    sh("ip", "link", "add", NS_A, "type", "veth", "peer", "name", NS_B)
    for ns, ip in ((NS_A, IP_A), (NS_B, IP_B)):
        sh("ip", "link", "set", ns, "netns", ns)
        sh("ip", "-n", ns, "addr", "add", ip + "/24", "dev", ns)
        sh("ip", "-n", ns, "link", "set", ns, "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    wait_for_link()


def wait_for_link(limit_s=30):
    """Until both ends of the link report carrier and state UP: the kernel applies a link's change of state
    up to a second late, and a job started before then finds no route to the other host."""
    deadline = time.monotonic() + limit_s
    while True:
        states = [subprocess.run(["ip", "-n", ns, "-o", "link", "show", "dev", ns], capture_output=True,
                                 text=True).stdout for ns in (NS_A, NS_B)]
        if all("LOWER_UP" in state and "state UP" in state for state in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the link between the hosts was not up after {limit_s} s: {states}")
        time.sleep(0.1)


def tear_down_hosts():
    for ns in (NS_A, NS_B):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def write_agent(folder: Path, unshared_dir: Path) -> Path:
    """The rsh agent mpirun starts B's daemon with: `agent [options] HOST COMMAND...` as ssh is called. On B it
    enters namespace B with a host name of its own, and mounts an empty tmpfs over `unshared_dir` (visible in
    B's mount namespace only, as a folder local to B). Each start and its exit code go to agent.log, which a
    failing test prints: Open MPI says only that a daemon did not start."""
    agent = folder / "agent.sh"
    log = folder / "agent.log"
    agent.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        while [ "${{1#-}}" != "$1" ]; do shift; done
        host=$1; shift
        [ "$host" = {IP_B} ] || {{ echo "agent: unknown host $host" >&2; exit 1; }}
        echo "$(date +%T.%N) start: $*" >> {log}
        ip netns exec {NS_B} unshare --uts sh -c 'hostname {HOST_B} && mount -t tmpfs none {unshared_dir} && '"$*"
        code=$?
        echo "$(date +%T.%N) exit $code" >> {log}
        exit $code
        """))
    agent.chmod(0o755)
    return agent


class TwoHosts(CliTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        set_up_hosts()
        cls.folder = Path(cls.class_tmp.name)
        cls.unshared = cls.folder / "local-to-b"
        cls.unshared.mkdir()
        cls.agent = write_agent(cls.folder, cls.unshared)
        # Open MPI's session directories: a daemon killed after a lost link leaves its own behind
        cls.session_dirs = cls.folder / "ompi"
        cls.session_dirs.mkdir()
        cls.hostfile = cls.folder / "hostfile"
        cls.hostfile.write_text(f"{IP_A} slots=1\n{IP_B} slots=1\n")

    @classmethod
    def tearDownClass(cls):
        kill_leftovers(cls.agent)
        tear_down_hosts()
        super().tearDownClass()

    def mpirun_two_hosts(self) -> list:
        return ["ip", "netns", "exec", NS_A, "mpirun", "--allow-run-as-root", "-np", "2", "--hostfile",
                str(self.hostfile), "--mca", "plm_rsh_agent", str(self.agent), "--mca", "btl", "tcp,self",
                "--mca", "btl_tcp_if_include", SUBNET + ".0/24", "--mca", "oob_tcp_if_include", SUBNET + ".0/24",
                "--mca", "orte_tmpdir_base", str(self.session_dirs),
                "-x", "OMP_NUM_THREADS=1", "-x", "ASAN_OPTIONS=detect_leaks=0"]

    def start(self, mpirun_options=(), **flags) -> subprocess.Popen:
        """The job, its output into files (B's daemon may outlive mpirun, holding a pipe open)."""
        words = run_flags(**{"data": self.data, "zero_stage": 1, **flags})
        self.addCleanup(kill_leftovers, self.agent)
        with open(self.tmp / "stdout", "w") as out, open(self.tmp / "stderr", "w") as err:
            return subprocess.Popen([*self.mpirun_two_hosts(), *mpirun_options, MEMTRAIN, "train",
                                     *map(str, words)],
                                    stdout=out, stderr=err, start_new_session=True)

    def output(self):
        """The job's stdout, and its stderr with the agent's log of B's daemons after it."""
        log = self.folder / "agent.log"
        agent_log = log.read_text() if log.exists() else "(no daemon started on B)\n"
        stderr = (self.tmp / "stderr").read_text()
        return (self.tmp / "stdout").read_text(), f"{stderr}\nagent.log:\n{agent_log}"

    def finish(self, job: subprocess.Popen, limit_s: float):
        """The job's (exit code, stdout, stderr); killed and failed when it outlives limit_s."""
        try:
            job.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            out, err = self.output()
            self.fail(f"the job still ran after {limit_s} s\nstdout:\n{out[-2000:]}\nstderr:\n{err[-2000:]}")
        return (job.returncode, *self.output())

    def test_data_parallel_across_hosts_repeats_one_host_bitwise(self):
        flags = {"train_iters": 4, "global_batch_size": 4, "no_shuffle": True}
        code, out, err = self.finish(self.start(out=self.tmp / "two-hosts", **flags), 120)
        self.assertEqual(code, 0, err)
        self.assertIn("world 2 ranks = tensor 1 x pipeline 1 x data 2 | ZeRO stage 1", out)
        one_host = CliTestCase.train(self, out=self.tmp / "one-host", ranks=2, zero_stage=1, expect=0, **flags)
        self.assertEqual(one_host.returncode, 0)
        losses = [[r["loss"] for r in read_metrics(self.tmp / run)] for run in ("two-hosts", "one-host")]
        self.assertEqual(len(losses[0]), 4)
        self.assertEqual(losses[0], losses[1])

    def train_until_first_step(self, job: subprocess.Popen, out: Path):
        deadline = time.monotonic() + 90
        while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
            self.assertIsNone(job.poll(), "the job ended before training")
            self.assertLess(time.monotonic(), deadline, "no step within 90 s")
            time.sleep(0.2)
        self.assertEqual(len(ranks_running(out)), 2)

    def take_link_down(self) -> float:
        sh("ip", "-n", NS_A, "link", "set", NS_A, "down")
        self.addCleanup(wait_for_link)
        self.addCleanup(sh, "ip", "-n", NS_A, "link", "set", NS_A, "up")
        return time.monotonic()

    def test_a_link_taken_down_ends_every_rank_within_the_timeout(self):
        out = self.tmp / "link-down"
        job = self.start(out=out, train_iters=100000, distributed_timeout_minutes=TIMEOUT_MINUTES)
        try:
            self.train_until_first_step(job, out)
            down = self.take_link_down()
            while ranks_running(out) and time.monotonic() < down + TIMEOUT_MINUTES * 60 + MARGIN_S:
                time.sleep(0.2)
            ended = time.monotonic() - down
            self.assertEqual(ranks_running(out), [], f"ranks still ran {ended:.0f} s after the link went down")
            self.assertGreaterEqual(ended, TIMEOUT_MINUTES * 60 * 0.9, "the ranks ended before the limit")
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        err = self.output()[1]
        self.assertRegex(err, r"memtrain: error: \w+: world rank 0 on \S+ waited longer than "
                              r"--distributed-timeout-minutes 0.1 for world rank 1 ")
        print(f"link down: every rank ended after {ended:.1f} s (limit {TIMEOUT_MINUTES * 60:.0f} s)")

    def test_with_the_keepalive_under_the_timeout_mpirun_itself_ends_within_it(self):
        out = self.tmp / "keepalive"
        job = self.start(KEEPALIVE, out=out, train_iters=100000, distributed_timeout_minutes=TIMEOUT_MINUTES)
        try:
            self.train_until_first_step(job, out)
            down = self.take_link_down()
            job.wait(timeout=TIMEOUT_MINUTES * 60 + MARGIN_S)
            ended = time.monotonic() - down
        except subprocess.TimeoutExpired:
            self.fail(f"mpirun still ran {TIMEOUT_MINUTES * 60 + MARGIN_S:.0f} s after the link went down")
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
        self.assertNotEqual(job.returncode, 0, self.output()[1])
        self.assertEqual(ranks_running(out), [])
        self.assertLessEqual(ended, TIMEOUT_MINUTES * 60 + MARGIN_S)
        print(f"link down with the keepalive: mpirun ended after {ended:.1f} s, exit {job.returncode}")

    def test_a_save_not_shared_by_the_other_host_is_refused_before_step_1(self):
        save = self.unshared / "checkpoints"
        code, out, err = self.finish(self.start(out=self.tmp / "unshared", save=save), 120)
        self.assertEqual(code, 1, err)
        errors = [line for line in err.splitlines() if line.startswith("memtrain: error: ")]
        self.assertEqual(len(errors), 1, err)
        self.assertIn(f"rank 1 on {HOST_B}: --save {save}: this rank does not see", errors[0])
        self.assertNotIn("step 1", out)
        self.assertFalse(save.exists(), "a refused job left its --save")


if __name__ == "__main__":
    reason = why_not_runnable()
    if reason:
        print(f"SKIP: {reason}")
        sys.exit(SKIPPED)
    unittest.main(verbosity=2)
