"""A rank that waits longer than the communicator's time limit (--distributed-timeout-minutes) for another
rank ends the whole job, within seconds of the limit, with one line naming the exchange, the waiting rank and
its host, and the rank it waited for.

usage: test_timeout.py EXCHANGE STALLED-RANK MPIRUN-COMMAND...
  (the command runs dist_mpi_test --stall EXCHANGE; its limit is 1.5 s, its stalled rank sleeps 60 s)
"""
import sys

from bounded_job import run_bounded

LIMIT_S = 30


def main() -> int:
    exchange, stalled, command = sys.argv[1], sys.argv[2], sys.argv[3:]
    output = run_bounded(command, LIMIT_S, "the time limit did not end it")
    if output is None:
        return 1
    operation = "all_reduce_sum" if exchange == "group" else exchange
    wanted = f"memtrain: error: {operation}: world rank "
    lines = [line for line in output.splitlines() if line.startswith(wanted)]
    if not lines:
        print(f"FAIL: no line starting {wanted!r}", file=sys.stderr)
        return 1
    named = f"world ranks 0, 1, {stalled})" if exchange == "barrier" else f"world rank {stalled} "
    if not any("waited longer than --distributed-timeout-minutes 0.025 for " in line and named in line
               for line in lines):
        print(f"FAIL: the timeout line does not name the stalled rank {stalled}", file=sys.stderr)
        return 1
    if "nobody ended the job" in output:
        print("FAIL: the stalled rank outlived the timeout", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
