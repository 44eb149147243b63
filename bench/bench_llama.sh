#!/usr/bin/env bash
# Trains a LLaMA of about 100M parameters (bench/llama-100m.json: 10 layers, C=768, 12 query heads on 4 KV
# heads, SwiGLU 2048, tied head; 101,528,064 parameters) with memtrain and with PyTorch (bench/torch_llama.py),
# one configuration after the other on the same tokens, and prints their throughput, peak RSS and the ratios
# of the two. Run from anywhere after scripts/setup.sh.
#   CONFIGS   which runs, in order (default: memtrain-bf16 torch-bf16; space- or comma-separated)
#               memtrain-fp32     memtrain train
#               memtrain-bf16     memtrain train --bf16
#               torch-fp32        torch_llama.py (plain fp32)
#               torch-bf16        torch_llama.py --autocast bf16
#             and the fine-tunes (issue 18), all bf16, with LoRA of rank 16 on every linear of the layers:
#               memtrain-lora     memtrain train --bf16 --lora-rank 16 --lora-alpha 32
#               memtrain-qlora    the same over an nf4 base (--base-quant nf4)
#               torch-lora        torch_llama.py --autocast bf16 --lora-rank 16 (PEFT's formula)
#             (CONFIGS="memtrain-bf16 memtrain-lora memtrain-qlora torch-lora": the full fine-tune beside them)
#   STEPS, SKIP, THREADS, B, T, OUT, MEMTRAIN   as for bench_gpt2.sh (defaults 6, 2, 2, 4, 256,
#             TMPDIR/memtrain-bench-llama, build/memtrain)
set -euo pipefail
cd "$(dirname "$0")/.."

configs="${CONFIGS:-memtrain-bf16 torch-bf16}"
configs="${configs//,/ }"
steps="${STEPS:-6}"
skip="${SKIP:-2}"
threads="${THREADS:-2}"
batch="${B:-4}"
seq="${T:-256}"
out="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-llama}"
memtrain="${MEMTRAIN:-build/memtrain}"
python=/usr/bin/python3  # Debian's, with torch
model=bench/llama-100m.json
torch_script="bench/torch_llama.py --config $model"

lora="--lora-rank 16 --lora-alpha 32"
declare -A flags=(
  [memtrain-fp32]=""
  [memtrain-bf16]="--bf16"
  [torch-fp32]="--autocast off"
  [torch-bf16]="--autocast bf16"
  [memtrain-lora]="--bf16 $lora"
  [memtrain-qlora]="--bf16 $lora --base-quant nf4"
  [torch-lora]="--autocast bf16 $lora"
)

# shellcheck source=bench/lib.sh
source bench/lib.sh

check_inputs

# The LLaMA issue asks for the tokens/s ratio and both peak RSS: no target value, so `target` marks only which
# side is better (memtrain faster, memtrain smaller).
# shellcheck disable=SC2034  # read by write_result in lib.sh
targets='[
  {name: "memtrain bf16 / PyTorch bf16 tokens/s", num: "memtrain-bf16", den: "torch-bf16", op: ">=", target: 1},
  {name: "peak RSS memtrain bf16 / PyTorch bf16", num: "memtrain-bf16", den: "torch-bf16", rss: true, op: "<=",
   target: 1},
  {name: "memtrain fp32 / PyTorch fp32 tokens/s", num: "memtrain-fp32", den: "torch-fp32", op: ">=", target: 1},
  {name: "peak RSS memtrain fp32 / PyTorch fp32", num: "memtrain-fp32", den: "torch-fp32", rss: true, op: "<=",
   target: 1},
  {name: "memtrain LoRA / PyTorch LoRA tokens/s", num: "memtrain-lora", den: "torch-lora", op: ">=", target: 1},
  {name: "peak RSS memtrain LoRA / PyTorch LoRA", num: "memtrain-lora", den: "torch-lora", rss: true, op: "<=",
   target: 1},
  {name: "peak RSS memtrain QLoRA / memtrain LoRA", num: "memtrain-qlora", den: "memtrain-lora", rss: true,
   op: "<=", target: 1}]'

run_configs
