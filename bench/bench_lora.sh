#!/usr/bin/env bash
# Fine-tuning the ~100M LLaMA (bench/llama-100m.json, as bench_llama.sh) three ways with memtrain, all bf16:
# the full model, LoRA of rank 16 on every linear of the layers, and QLoRA (the same LoRA over an nf4 base),
# beside the same LoRA in PyTorch (bench/torch_llama.py --lora-rank, PEFT's formula, bf16 autocast), one
# configuration after the other on the same tokens. Prints tokens/s, peak RSS and the model states' bytes
# (weights, frozen ones too, master weights, gradients, optimizer states) of each.
#   CONFIGS   which runs, in order (default: memtrain-full memtrain-lora memtrain-qlora torch-lora)
#   STEPS, SKIP, THREADS, B, T, OUT, MEMTRAIN   as for bench_llama.sh (defaults 6, 2, 2, 4, 256,
#             TMPDIR/memtrain-bench-lora, build/memtrain)
set -euo pipefail
cd "$(dirname "$0")/.."

configs="${CONFIGS:-memtrain-full memtrain-lora memtrain-qlora torch-lora}"
configs="${configs//,/ }"
steps="${STEPS:-6}"
skip="${SKIP:-2}"
threads="${THREADS:-2}"
batch="${B:-4}"
seq="${T:-256}"
out="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-lora}"
memtrain="${MEMTRAIN:-build/memtrain}"
python=/usr/bin/python3  # Debian's, with torch
model=bench/llama-100m.json
torch_script="bench/torch_llama.py --config $model"
lora="--lora-rank 16 --lora-alpha 32"

declare -A flags=(
  [memtrain-full]="--bf16"
  [memtrain-lora]="--bf16 $lora"
  [memtrain-qlora]="--bf16 $lora --base-quant nf4"
  [torch-lora]="--autocast bf16 $lora"
)

# shellcheck source=bench/lib.sh
source bench/lib.sh

check_inputs

# The LoRA issue asks for them side by side: no target value, so `target` marks which side is better.
# shellcheck disable=SC2034  # read by write_result in lib.sh
targets='[
  {name: "memtrain LoRA / PyTorch LoRA tokens/s", num: "memtrain-lora", den: "torch-lora", op: ">=", target: 1},
  {name: "peak RSS memtrain LoRA / PyTorch LoRA", num: "memtrain-lora", den: "torch-lora", rss: true, op: "<=",
   target: 1},
  {name: "peak RSS memtrain QLoRA / memtrain LoRA", num: "memtrain-qlora", den: "memtrain-lora", rss: true,
   op: "<=", target: 1}]'

run_configs
