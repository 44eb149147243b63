#!/usr/bin/env bash
# Adam's moments in fp32, bf16, fp8 and int8 (--exp-avg-dtype/--exp-avg-sq-dtype) on GPT-2 124M and the 101.5M
# LLaMA (bench/llama-100m.json), bf16 weights with an fp32 master and bf16 gradients (--main-grads-dtype bf16:
# the layout of the issue's 10 bytes per parameter, and of bench_adamw_8bit): one configuration after the other
# on the same tokens, with their model-state bytes per parameter, peak RSS and tokens/s, and the ratios to bf16
# moments. The trainer does not time its AdamW step apart, so the AdamW time per step is bench_adamw_8bit's at
# each model's parameter count, REPEATS times alternately (the median of each run's median), beside the
# difference of the training configurations' median step times. Run from anywhere after scripts/setup.sh.
#   MODELS    which models, in order (default: gpt2 llama)
#   CONFIGS   which moment dtypes, in order (default: memtrain-fp32 memtrain-bf16 memtrain-fp8 memtrain-int8)
#   STEPS, SKIP, THREADS, B, T, MEMTRAIN   as for bench_gpt2.sh (defaults 6, 2, 2, 1, 256, build/memtrain)
#   REPEATS   runs of bench_adamw_8bit per model (default 3)
#   OUT       where data, logs and results go (default TMPDIR/memtrain-bench-optimizer-states; a folder per model)
set -euo pipefail
cd "$(dirname "$0")/.."

models="${MODELS:-gpt2 llama}"
configs="${CONFIGS:-memtrain-fp32 memtrain-bf16 memtrain-fp8 memtrain-int8}"
configs="${configs//,/ }"
steps="${STEPS:-6}"
skip="${SKIP:-2}"
threads="${THREADS:-2}"
batch="${B:-1}"
seq="${T:-256}"
repeats="${REPEATS:-3}"
base="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-optimizer-states}"
memtrain="${MEMTRAIN:-build/memtrain}"
adamw_bench="$(dirname "$memtrain")/bench/bench_adamw_8bit"

declare -A flags
for dtype in fp32 bf16 fp8 int8; do
  flags[memtrain-$dtype]="--bf16 --main-grads-dtype bf16 --exp-avg-dtype $dtype --exp-avg-sq-dtype $dtype"
done
# memtrain's num_params of each model (memory.json), the n bench_adamw_8bit updates.
declare -A model_flag=([gpt2]=gpt2 [llama]=bench/llama-100m.json) params=([gpt2]=124475904 [llama]=101528064)

# shellcheck source=bench/lib.sh
source bench/lib.sh

check_inputs
[ -x "$adamw_bench" ] || die "$adamw_bench not found, run scripts/setup.sh"

# No target of the issue is a tokens/s ratio, so `target` 1 marks only which side is better.
# shellcheck disable=SC2034  # read by write_result in lib.sh
targets='[
  {name: "fp32 / bf16 moments tokens/s", num: "memtrain-fp32", den: "memtrain-bf16", op: ">=", target: 1},
  {name: "fp8 / bf16 moments tokens/s", num: "memtrain-fp8", den: "memtrain-bf16", op: ">=", target: 1},
  {name: "int8 / bf16 moments tokens/s", num: "memtrain-int8", den: "memtrain-bf16", op: ">=", target: 1},
  {name: "peak RSS fp8 / bf16 moments", num: "memtrain-fp8", den: "memtrain-bf16", rss: true, op: "<=", target: 1},
  {name: "peak RSS int8 / bf16 moments", num: "memtrain-int8", den: "memtrain-bf16", rss: true, op: "<=",
   target: 1}]'

# The median step time of each configuration in OUT and its difference from bf16 moments': the AdamW time the
# training step adds or saves, forward and backward being the same.
print_step_times() {
  jq -r '.configs as $c | ($c["memtrain-bf16"].step_ms // null) as $ref
    | def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    "config\tmedian step ms\tminus bf16 moments'"'"'",
    ($c[] | select(.step_ms) | [.name, (.step_ms | median * 10 | round / 10),
      (if $ref then (.step_ms | median) - ($ref | median) | . * 10 | round / 10 else "-" end)] | @tsv)' \
    "$out/result.json" | column -t -s $'\t'
}

# bench_adamw_8bit at the model's size, `repeats` times; prints each layout's median of the runs' medians.
time_adamw() {
  local n="$1" log="$out/adamw.log"
  : > "$log"
  for _ in $(seq "$repeats"); do
    wait_for_quiet_machine
    "$adamw_bench" "$threads" 7 "$n" | tee -a "$log" >&2
  done
  echo "AdamW step over $n parameters, $threads threads, median of $repeats runs (each the median of 7 steps):"
  jq -Rrs 'split("\n") | map(select(test(" ms ")) | capture("^(?<layout>.*?)\\s{2,}(?<ms>[0-9.]+) ms")
      | .ms |= tonumber) | group_by(.layout)[] | (map(.ms) | sort) as $v
    | "  \(.[0].layout): \(if ($v | length) % 2 == 1 then $v[($v | length) / 2 | floor]
        else ($v[($v | length) / 2 - 1] + $v[($v | length) / 2]) / 2 end) ms (runs: \($v | map(tostring) | join(", ")))"' \
    "$log"
}

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
  print_step_times
  echo
  time_adamw "${params[$m]}"
  echo
done
