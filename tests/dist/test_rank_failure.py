"""A rank that dies or fails while the others wait in a collective must end the whole mpirun job, non-zero and
well within a minute, instead of leaving the others blocked forever.

usage: test_rank_failure.py MODE MPIRUN-COMMAND...
  (the command runs dist_mpi_test --fail MODE or --fail-in-group MODE)
"""
import sys

from bounded_job import run_bounded

LIMIT_S = 60


def main() -> int:
    mode, command = sys.argv[1], sys.argv[2:]
    output = run_bounded(command, LIMIT_S, "the other ranks hang")
    if output is None:
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
