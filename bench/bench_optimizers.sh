#!/usr/bin/env bash
# AdamW against the update in the backward (--optimizer-in-backward), Adam-mini (--optimizer adam-mini) and both,
# on GPT-2 124M and the 101.5M LLaMA (bench/llama-100m.json), with bf16 weights, no master copy and bf16
# gradients (the lean layout of issue 30's 7B estimate): one configuration after the other on the same tokens,
# with tokens/s, peak RSS and model-state bytes, and the ratios to AdamW. The update in the backward is run
# without clipping (one pass a step) and with it (--clip-grad 1: a first pass for the norm, the cost said in
# docs/optimizer_states.md). Run from anywhere after scripts/setup.sh.
#   MODELS    which models, in order (default: gpt2 llama)
#   CONFIGS   which configurations, in order (default: all five below)
#   STEPS, SKIP, THREADS, B, T, MEMTRAIN   as for bench_gpt2.sh (defaults 6, 2, 2, 1, 256, build/memtrain)
#   OUT       where data, logs and results go (default TMPDIR/memtrain-bench-optimizers; a folder per model)
set -euo pipefail
cd "$(dirname "$0")/.."

models="${MODELS:-gpt2 llama}"
configs="${CONFIGS:-memtrain-adamw memtrain-in-backward memtrain-in-backward-clip memtrain-adam-mini memtrain-both}"
configs="${configs//,/ }"
steps="${STEPS:-6}"
skip="${SKIP:-2}"
threads="${THREADS:-2}"
batch="${B:-1}"
seq="${T:-256}"
base="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-optimizers}"
memtrain="${MEMTRAIN:-build/memtrain}"

lean="--bf16 --main-params-dtype none --main-grads-dtype bf16 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
declare -A flags=(
  [memtrain-adamw]="$lean --clip-grad 0"
  [memtrain-in-backward]="$lean --clip-grad 0 --optimizer-in-backward"
  [memtrain-in-backward-clip]="$lean --clip-grad 1 --optimizer-in-backward"
  [memtrain-adam-mini]="$lean --clip-grad 0 --optimizer adam-mini"
  [memtrain-both]="$lean --clip-grad 0 --optimizer adam-mini --optimizer-in-backward"
)
declare -A model_flag=([gpt2]=gpt2 [llama]=bench/llama-100m.json)

# shellcheck source=bench/lib.sh
source bench/lib.sh

check_inputs

# No target of the issue is a ratio: `target` 1 marks only which side is better.
# shellcheck disable=SC2034  # read by write_result in lib.sh
targets='[
  {name: "in backward / AdamW tokens/s", num: "memtrain-in-backward", den: "memtrain-adamw", op: ">=", target: 1},
  {name: "in backward, clipped / AdamW tokens/s", num: "memtrain-in-backward-clip", den: "memtrain-adamw",
   op: ">=", target: 1},
  {name: "Adam-mini / AdamW tokens/s", num: "memtrain-adam-mini", den: "memtrain-adamw", op: ">=", target: 1},
  {name: "both / AdamW tokens/s", num: "memtrain-both", den: "memtrain-adamw", op: ">=", target: 1},
  {name: "peak RSS in backward / AdamW", num: "memtrain-in-backward", den: "memtrain-adamw", rss: true,
   op: "<=", target: 1},
  {name: "peak RSS Adam-mini / AdamW", num: "memtrain-adam-mini", den: "memtrain-adamw", rss: true, op: "<=",
   target: 1},
  {name: "peak RSS both / AdamW", num: "memtrain-both", den: "memtrain-adamw", rss: true, op: "<=", target: 1}]'

for m in $models; do
  [ -n "${model_flag[$m]+set}" ] || die "unknown model '$m' in MODELS (known: ${!model_flag[*]})"
  model="${model_flag[$m]}"
  out="$base/$m"
  mkdir -p "$out"
  # The fortunes once for both models.
  [ -e "$out/data" ] || ln -s "$base/data" "$out/data"
  mkdir -p "$base/data"
  echo "== $m ($model) =="
  run_configs
  echo
done
