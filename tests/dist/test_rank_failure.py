"""A rank that dies or fails while the others wait in a collective must end the whole mpirun job, non-zero and
well within a minute, instead of leaving the others blocked forever.

usage: test_rank_failure.py MODE MPIRUN-COMMAND...
  (the command runs dist_mpi_test --fail MODE or --fail-in-group MODE)
"""
import os
import signal
import subprocess
import sys
import time

LIMIT_S = 60


def main() -> int:
    mode, command = sys.argv[1], sys.argv[2:]
    start = time.monotonic()
    # A session of its own, so that a hung job's ranks can be killed with mpirun.
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    try:
        output, _ = job.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.communicate()
        print(f"FAIL: the job still ran after {LIMIT_S} s: the other ranks hang", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - start
    print(output)
    print(f"exit status {job.returncode} after {elapsed:.1f} s")
    if job.returncode == 0:
        print("FAIL: mpirun exited 0", file=sys.stderr)
        return 1
    if "completed without the failed rank" in output:
        print("FAIL: a collective completed without every rank", file=sys.stderr)
        return 1
    if mode == "throw" and "failed on purpose" not in output:
        print("FAIL: the failing rank's error message is missing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
