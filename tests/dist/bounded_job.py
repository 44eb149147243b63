"""What the tests of a job that must end share: run an mpirun command in a session of its own, bounded in
time, and say why it failed."""
import os
import signal
import subprocess
import sys
import time


def run_bounded(command: list, limit_s: float, hung: str):
    """Runs `command` to its end within limit_s seconds and prints its output and exit status. Returns that
    output, or None (after printing FAIL and `hung`, with the job killed) when it ran longer or exited 0."""
    start = time.monotonic()
    # A session of its own, so that a hung job's ranks can be killed with mpirun.
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        output, _ = job.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
        print(f"FAIL: the job still ran after {limit_s} s: {hung}", file=sys.stderr)
        return None
    print(output)
    print(f"exit status {job.returncode} after {time.monotonic() - start:.1f} s")
    if job.returncode == 0:
        print("FAIL: mpirun exited 0", file=sys.stderr)
        return None
    return output
