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

die() { echo "bench: $*" >&2; exit 1; }

for c in $configs; do
  [ -n "${flags[$c]+set}" ] || die "unknown configuration '$c' in CONFIGS (known: ${!flags[*]})"
done
[ "$steps" -gt "$skip" ] || die "STEPS ($steps) must exceed SKIP ($skip)"
command -v jq >/dev/null || die "needs jq (apt-get install -y jq)"
[ -x "$memtrain" ] || die "$memtrain not found, run scripts/setup.sh"

# The fortune texts tokenized once into OUT/data; every run reads its training shard in order.
prepare_data() {
  local data="$out/data" texts=() f
  if ! compgen -G "$data/fortunes_train_*.bin" >/dev/null; then
    # The fortune texts, without their .dat indexes and .u8 duplicates.
    for f in /usr/share/games/fortunes/*; do
      case "$f" in *.dat | *.u8) ;; *) texts+=("$f") ;; esac
    done
    mkdir -p "$data"
    "$memtrain" prepare "${texts[@]}" --out "$data" --name fortunes >&2
  fi
  shard="$(compgen -G "$data/fortunes_train_*.bin" | head -n1)"
}

load_average() { cut -d' ' -f1-3 /proc/loadavg; }

# Reads {steps: [tokens/s of each timed step], ...} on stdin and adds the median and the fastest step.
# Other jobs only ever slow a step down, so the fastest step is the least disturbed estimate; a median
# more than 10% below it says that other jobs slowed most steps, and the run should be repeated.
summarize() {
  jq '.steps as $s | ($s | sort) as $o | . + {
        tokens_per_sec: (if ($o | length) % 2 == 1 then $o[($o | length) / 2 | floor]
                         else ($o[($o | length) / 2 - 1] + $o[($o | length) / 2]) / 2 end),
        best_step_tokens_per_sec: ($o | max)}
      | . + {steady: (.tokens_per_sec >= 0.9 * .best_step_tokens_per_sec)}'
}

# run_memtrain NAME: trains STEPS steps into OUT/NAME and writes the summary OUT/NAME.json.
run_memtrain() {
  local name="$1" dir="$out/$1" load
  # shellcheck disable=SC2086  # the flags are words
  set -- ${flags[$name]}
  load="$(load_average)"
  echo "bench: load average $load; $name: memtrain train ${*:-(fp32)}, $steps steps" >&2
  rm -rf "$dir"
  if ! "$memtrain" train --model gpt2 --data "$out/data" --seq-length "$seq" --micro-batch-size "$batch" \
      --threads "$threads" --train-iters "$steps" --eval-interval 0 --no-shuffle --out "$dir" "$@" \
      > "$dir.log" 2>&1; then
    tail -n 5 "$dir.log" >&2
    die "$name failed, log in $dir.log"
  fi
  jq -s --arg name "$name" --arg flags "$*" --arg load "$load" --argjson skip "$skip" \
    --slurpfile memory "$dir/memory.json" \
    '{name: $name, engine: "memtrain", flags: $flags, load_average: $load,
      steps: [.[] | select(.step > $skip) | .tokens_per_sec],
      step_ms: [.[] | select(.step > $skip) | .step_ms],
      losses: [.[] | .loss],
      peak_rss_bytes: $memory[0].peak_rss_bytes,
      # {planned, measured}: the measured value, the bytes the run actually held.
      model_state_bytes_per_param: ($memory[0].model_state_bytes_per_param
                                    | if type == "object" then .measured else . end)}' \
    "$dir/metrics.jsonl" | summarize > "$dir.json"
}

# run_torch NAME: SKIP warmup steps and STEPS-SKIP timed ones of torch_gpt2.py; summary in OUT/NAME.json.
run_torch() {
  local name="$1" dir="$out/$1" load
  # shellcheck disable=SC2086
  set -- ${flags[$name]}
  load="$(load_average)"
  echo "bench: load average $load; $name: torch_gpt2.py $*, $skip warmup + $((steps - skip)) timed steps" >&2
  if ! "$python" bench/torch_gpt2.py --shard "$shard" --batch "$batch" --seq "$seq" --threads "$threads" \
      --warmup "$skip" --steps "$((steps - skip))" "$@" > "$dir.raw.json" 2> "$dir.log"; then
    tail -n 5 "$dir.log" >&2
    die "$name failed, log in $dir.log"
  fi
  jq --arg name "$name" --arg flags "$*" --arg load "$load" \
    '{name: $name, engine: ("PyTorch " + .torch_version), flags: $flags, load_average: $load,
      steps: [.batch * .seq / .step_ms[] * 1000], step_ms, losses, peak_rss_bytes,
      model_state_bytes_per_param}' \
    "$dir.raw.json" | summarize > "$dir.json"
}

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
    case "$c" in
      memtrain-*) run_memtrain "$c" ;;
      torch-*) run_torch "$c" ;;
    esac
  done
  write_result
  print_table
}

main
