#!/usr/bin/env bash
# Adam's moments in fp32, int8, fp8 and bf16 over the same 300 steps of gpt2-demo (the convergence test
# tests/cli/test_convergence.py with --svg, at 300 steps where CI runs 150): prints the validation losses
# against fp32 moments' and draws the four runs' curves into SVG with `memtrain report`, and AdamW's, the
# update in the backward's, Adam-mini's and both's into OPTIMIZER_SVG. About 3 minutes on 2 idle cores.
#   OUT       where data and runs go (default TMPDIR/memtrain-bench-moments)
#   SVG       the picture (default docs/images/moment_convergence.svg)
#   OPTIMIZER_SVG  the optimizers' picture (default docs/images/optimizer_convergence.svg)
#   MEMTRAIN  the memtrain binary (default build/memtrain)
set -euo pipefail
cd "$(dirname "$0")/.."
MEMTRAIN_BIN="${MEMTRAIN:-build/memtrain}" exec /usr/bin/python3 tests/cli/test_convergence.py \
  "${OUT:-${TMPDIR:-/tmp}/memtrain-bench-moments}" --steps 300 --svg "${SVG:-docs/images/moment_convergence.svg}" \
  --optimizer-svg "${OPTIMIZER_SVG:-docs/images/optimizer_convergence.svg}"
