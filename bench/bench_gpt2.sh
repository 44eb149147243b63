#!/usr/bin/env bash
# Trains GPT-2 124M in several precisions with memtrain and with PyTorch, one configuration after the
# other on the same tokens, and prints their throughput, peak RSS and the ratios the mixed-precision
# targets name. Run from anywhere after scripts/setup.sh.
#   CONFIGS   which runs, in order (default: all five below, space- or comma-separated)
#               memtrain-fp32     memtrain train
#               memtrain-bf16     memtrain train --bf16
#               memtrain-bf16-o2  memtrain train --bf16 --o2-optimizer --o2-gradient
#               torch-fp32        torch_gpt2.py (plain fp32)
#               torch-bf16        torch_gpt2.py --autocast bf16 (torch.autocast(device_type="cpu", dtype=bfloat16))
#   STEPS     steps per run; the first SKIP are warmup, left out of the medians (default 6)
#   SKIP      leading steps left out of the medians (default 2)
#   THREADS   threads for all runs (default 2)
#   B, T      micro-batch size and sequence length (default 4, 256)
#   OUT       where data, logs and results go (default: outside the tree, under TMPDIR)
#   MEMTRAIN  the memtrain binary (default build/memtrain)
set -euo pipefail
cd "$(dirname "$0")/.."

configs="${CONFIGS:-memtrain-fp32 memtrain-bf16 memtrain-bf16-o2 torch-fp32 torch-bf16}"
configs="${configs//,/ }"
steps="${STEPS:-6}"
skip="${SKIP:-2}"
threads="${THREADS:-2}"
batch="${B:-4}"
seq="${T:-256}"
out="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-gpt2}"
memtrain="${MEMTRAIN:-build/memtrain}"
# The pyenv python3 first on PATH has no torch; Debian's has 1.13.
python=/usr/bin/python3

# Each configuration's engine-specific flags.
declare -A flags=(
  [memtrain-fp32]=""
  [memtrain-bf16]="--bf16"
  [memtrain-bf16-o2]="--bf16 --o2-optimizer --o2-gradient"
  [torch-fp32]="--autocast off"
  [torch-bf16]="--autocast bf16"
)

# shellcheck source=bench/lib.sh
source bench/lib.sh

check_inputs

# The targets of the mixed-precision issue, each a ratio of two configurations' values (write_result in lib.sh).
# Other jobs do not move peak RSS, so the RSS ratio is steady whatever the steps did.
targets='[
  {name: "memtrain bf16 / PyTorch bf16 tokens/s", num: "memtrain-bf16", den: "torch-bf16",
   op: ">=", target: 1.6, goal: 2.0},
  {name: "memtrain bf16 / memtrain fp32 tokens/s", num: "memtrain-bf16", den: "memtrain-fp32",
   op: ">=", target: 1.6},
  {name: "O2 cost = 1 - bf16+O2 / bf16 tokens/s", num: "memtrain-bf16-o2", den: "memtrain-bf16",
   cost: true, op: "<", target: 0.03},
  {name: "peak RSS memtrain bf16 / PyTorch bf16", num: "memtrain-bf16", den: "torch-bf16",
   rss: true, op: "<=", target: 0.7}]'

run_configs
