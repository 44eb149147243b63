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

# The targets of the mixed-precision issue, each a ratio of two configurations' values. "cost" is
# 1 - num/den. A ratio whose configurations did not both run is left out. Other jobs do not move
# peak RSS, so the RSS ratio is steady whatever the steps did.
write_result() {
  local files=()
  for c in $configs; do files+=("$out/$c.json"); done
  jq -s --argjson steps "$steps" --argjson skip "$skip" --argjson threads "$threads" \
    --argjson batch "$batch" --argjson seq "$seq" '
    (map({(.name): .}) | add) as $c
    | def value(f; $r): ($c[$r.num] | f) / ($c[$r.den] | f) | if $r.cost then 1 - . else . end;
      def pass($r; $v): if $r.op == ">=" then $v >= $r.target elif $r.op == "<" then $v < $r.target
                        else $v <= $r.target end;
    {settings: {model: "gpt2", batch: $batch, seq: $seq, threads: $threads, steps: $steps,
                warmup_steps: $skip},
     configs: $c,
     targets: [
       {name: "memtrain bf16 / PyTorch bf16 tokens/s", num: "memtrain-bf16", den: "torch-bf16",
        op: ">=", target: 1.6, goal: 2.0},
       {name: "memtrain bf16 / memtrain fp32 tokens/s", num: "memtrain-bf16", den: "memtrain-fp32",
        op: ">=", target: 1.6},
       {name: "O2 cost = 1 - bf16+O2 / bf16 tokens/s", num: "memtrain-bf16-o2", den: "memtrain-bf16",
        cost: true, op: "<", target: 0.03},
       {name: "peak RSS memtrain bf16 / PyTorch bf16", num: "memtrain-bf16", den: "torch-bf16",
        rss: true, op: "<=", target: 0.7}]
     | map(select($c[.num] and $c[.den])
           | . as $r
           | if .rss then . + {value: value(.peak_rss_bytes; $r)}
             else . + {value: value(.tokens_per_sec; $r),
                       best_step_value: value(.best_step_tokens_per_sec; $r)} end
           | . + {pass: pass($r; .value), steady: (.rss or ($c[$r.num].steady and $c[$r.den].steady))})}' \
    "${files[@]}" > "$out/result.json"
}

print_table() {
  local r="$out/result.json"
  echo
  { printf 'config\tflags\tload avg\ttokens/s\tbest-step tokens/s\tsteady\tpeak RSS (GiB)\tstate B/param\tloss first -> last\n'
    jq -r '.configs[] | [.name, (if .flags == "" then "-" else .flags end), .load_average,
        (.tokens_per_sec * 10 | round / 10), (.best_step_tokens_per_sec * 10 | round / 10),
        (if .steady then "yes" else "NO" end),
        (.peak_rss_bytes / 1073741824 * 100 | round / 100),
        (.model_state_bytes_per_param // "?" | if type == "number" then . * 100 | round / 100 else . end),
        "\(.losses[0] * 100 | round / 100) -> \(.losses[-1] * 100 | round / 100)"] | @tsv' "$r"
  } | column -t -s $'\t'
  echo
  if [ "$(jq '.targets | length' "$r")" -eq 0 ]; then
    echo "(no target has both of its configurations in CONFIGS)"
    return
  fi
  { printf 'target\tmedian\tbest-step\ttarget\tresult\n'
    jq -r '.targets[] | [.name, (.value * 1000 | round / 1000),
        (.best_step_value // "-" | if type == "number" then . * 1000 | round / 1000 else . end),
        "\(.op) \(.target)\(if .goal then " (goal \(.goal))" else "" end)",
        (if .pass then "PASS" else "MISS" end) + (if .steady then "" else " (unsteady)" end)] | @tsv' "$r"
  } | column -t -s $'\t'
  echo
  echo "(tokens/s: median of steps $((skip + 1))-$steps; best-step: the fastest of them; steady: the median"
  echo " within 10% of the best step, else other jobs slowed most steps and the run should be repeated;"
  echo " PASS/MISS judged on the medians, (unsteady) when a configuration behind it was not steady;"
  echo " details in $out)"
}

main() {
  mkdir -p "$out"
  prepare_data
  for c in $configs; do
    # shellcheck disable=SC2086  # the flags are words
    case "$c" in
      memtrain-*) run_memtrain "$c" ${flags[$c]} ;;
      torch-*) run_torch "$c" ${flags[$c]} ;;
    esac
  done
  write_result
  print_table
}

main
