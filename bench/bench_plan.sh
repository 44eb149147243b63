#!/usr/bin/env bash
# The cost model against measured steps: calibrates this machine (memtrain calibrate, once as one process and
# once as two ranks under mpirun), trains GPT-2 124M in several configurations of one global batch for a few
# steps each, and prints per configuration the fastest timed step (other jobs only slow steps down, and
# calibrate keeps the best of its repeats too) with the median beside it, the cost model's prediction from the
# profile (bench/predict_step) and the error, then whether the predicted ranking of the three fastest matches
# the measured one. Every configuration trains the same tokens per step, as `memtrain plan`'s candidates do, so
# step time ranks them as throughput does. Run from anywhere after scripts/setup.sh.
#   CONFIGS    which runs, in order (default: all below)
#   STEPS      steps per run; the first SKIP are warmup, left out (default 5)
#   SKIP       leading steps left out (default 1)
#   ROUNDS     rounds of all configurations, interleaved (default 3)
#   THREADS    threads of the machine: a single process's, shared by the ranks of a data-parallel run (default 2)
#   GLOBAL, T  sequences per step and sequence length (default 4, 256)
#   OUT        where data, logs and results go (default: under TMPDIR)
#   MEMTRAIN   the memtrain binary (default build/memtrain); PREDICT the predict_step binary (build/bench/predict_step)
#   WAIT_MAX   seconds to wait before each run while another benchmark runs (default 120)
set -euo pipefail
cd "$(dirname "$0")/.."

steps="${STEPS:-5}"
skip="${SKIP:-1}"
rounds="${ROUNDS:-3}"
threads="${THREADS:-2}"
global="${GLOBAL:-4}"
seq="${T:-256}"
out="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-plan}"
memtrain="${MEMTRAIN:-build/memtrain}"
predict="${PREDICT:-build/bench/predict_step}"
export WAIT_MAX="${WAIT_MAX:-120}"
model=gpt2

# NAME -> "PRECISION RECOMPUTE MICRO RANKS ZERO_STAGE" as predict_step takes them (MICRO sequences per
# micro-batch per rank; accumulation makes up the global batch); train_flags turns them into memtrain's.
declare -A spec=(
  [fp32]="fp32 none 4 1 0"
  [bf16]="bf16 none 4 1 0"
  [bf16-o2]="bf16-o2 none 4 1 0"
  [bf16-selective]="bf16 selective 4 1 0"
  [bf16-full1]="bf16 uniform-1 4 1 0"
  [fp32-full1]="fp32 uniform-1 4 1 0"
  [bf16-block6]="bf16 block-6 4 1 0"
  [bf16-mb2x2]="bf16 none 2 1 0"
  [bf16-zero1-np2]="bf16 none 2 2 1"
  [bf16-zero3-np2]="bf16 none 2 2 3"
)
train_flags() {
  local precision="$1" recompute="$2" micro="$3" ranks="$4" stage="$5"
  case "$precision" in
    bf16) echo -n "--bf16 " ;;
    bf16-o2) echo -n "--bf16 --o2-optimizer --o2-gradient " ;;
  esac
  case "$recompute" in
    none) ;;
    selective) echo -n "--recompute-granularity selective " ;;
    *) echo -n "--recompute-granularity full --recompute-method ${recompute%-*} --recompute-num-layers ${recompute#*-} " ;;
  esac
  [ "$ranks" -gt 1 ] && echo -n "--zero-stage $stage "
  echo "--grad-accum-steps $((global / (micro * ranks)))"
}
configs="${CONFIGS:-fp32 bf16 bf16-o2 bf16-selective bf16-full1 fp32-full1 bf16-block6 bf16-mb2x2 bf16-zero1-np2 bf16-zero3-np2}"
configs="${configs//,/ }"

# shellcheck source=bench/lib.sh
source bench/lib.sh
declare -A flags
for c in "${!spec[@]}"; do
  read -r _ _ micro ranks _ <<< "${spec[$c]}"
  [ $((global % (micro * ranks))) -eq 0 ] || die "GLOBAL ($global) is not a multiple of $c's $micro x $ranks"
  # shellcheck disable=SC2086  # the spec's words are train_flags' arguments
  flags[$c]="$(train_flags ${spec[$c]})"
done
check_inputs
[ -x "$predict" ] || die "$predict not found: ninja -C build predict_step"
command -v mpirun >/dev/null || die "mpirun not found (run scripts/setup.sh)"

mkdir -p "$out"
prepare_data
wait_for_quiet_machine
# The ranks of a data-parallel run share the cores: its profile is calibrated the same way, and measures MPI.
"$memtrain" calibrate --threads "$threads" --scratch-dir "$out" --out "$out/profile.json" >&2
mpirun --allow-run-as-root --oversubscribe -np 2 "$memtrain" calibrate --threads "$((threads / 2))" \
  --scratch-dir "$out" --out "$out/profile.np2.json" >&2

# ROUNDS rounds, each running every configuration once: a slow spell of the shared machine then slows one
# run of every configuration rather than all runs of one. A configuration's measured step is its fastest over
# all rounds; "a is faster than b" is measured only when a's fastest step beat b's in every round.
# Each round starts further along the list, so no configuration always runs at the same point of a round.
read -r -a order <<< "$configs"
for ((round = 1; round <= rounds; round++)); do
  shift_by=$(((round - 1) * ${#order[@]} / rounds))
  for c in "${order[@]:shift_by}" "${order[@]:0:shift_by}"; do
    read -r _ _ micro ranks _ <<< "${spec[$c]}"
    # shellcheck disable=SC2086  # flags are words
    (batch=$micro threads=$((threads / ranks)) RANKS=$ranks run_memtrain "$c.round$round" ${flags[$c]})
  done
done

rows=()
for c in $configs; do
  # shellcheck disable=SC2086
  read -r precision recompute micro ranks stage <<< "${spec[$c]}"
  profile="$out/profile.json"
  [ "$ranks" -gt 1 ] && profile="$out/profile.np$ranks.json"
  "$predict" --ranks "$ranks" --zero-stage "$stage" "$profile" "$model" "$micro" "$seq" "$((threads / ranks))" \
    "$((global / (micro * ranks)))" "$precision" "$recompute" > "$out/$c.predicted.json"
  rows+=("$(jq -c -s --slurpfile p "$out/$c.predicted.json" --arg name "$c" \
    '{name: $name, flags: .[0].flags, load_average: (map(.load_average)),
      round_ms: map(.step_ms | min), measured_ms: (map(.step_ms) | add | min),
      median_ms: (map(.step_ms) | add | sort | .[length / 2 | floor]),
      predicted_ms: $p[0].step_ms, predicted: $p[0]}
     | . + {error: ((.predicted_ms - .measured_ms) / .measured_ms)}' "$out/$c".round*.json)")
done

# The top three by fastest step, measured and predicted. Measured, "a before b" holds only when a's fastest
# step beat b's in every round; closer than that, the two are tied at this machine's noise. The prediction
# matches when it puts none of its top three before a configuration that every round measured faster (one
# below it in its top three, or any outside it); "strict" compares the three fastest as they came out.
printf '%s\n' "${rows[@]}" | jq -s '
  def faster($a; $b): [range($a.round_ms | length) as $i | $a.round_ms[$i] < $b.round_ms[$i]] | all;
  {configs: ., within_25_percent: (map(select(.error | fabs <= 0.25)) | length),
   measured_top3: (sort_by(.measured_ms) | .[:3] | map(.name)),
   predicted: (sort_by(.predicted_ms) | map(.name))}
  | . as $r | ($r.configs | map({key: .name, value: .}) | from_entries) as $by
  | . + {predicted_top3: $r.predicted[:3],
         measured_order: (($r.measured_top3 + $r.predicted[:3] | unique) as $u
                          | [$u[] as $a | $u[] as $b | select(faster($by[$a]; $by[$b])) | "\($a) < \($b)"]),
         contradicted: [$r.predicted[:3] | to_entries[] as $x | $r.predicted[$x.key + 1:][] as $b
                        | select(faster($by[$b]; $by[$x.value])) | "\($b) < \($x.value)"]}
  | del(.predicted)
  | . + {top3_strict_match: (.measured_top3 == .predicted_top3), top3_match: ((.contradicted | length) == 0)}' \
  > "$out/result.json"

jq -r '.configs[] | "\(.name)\t measured \(.measured_ms | floor) ms (median \(.median_ms | floor); per round \(.round_ms | map(floor)))\t predicted \(.predicted_ms | floor) ms\t error \(.error * 100 | round)%"' "$out/result.json"
jq -r '"within 25%: \(.within_25_percent) of \(.configs | length); top 3 measured \(.measured_top3), predicted \(.predicted_top3): \(if .top3_match then "match" else "DIFFER" end) up to ties (orders every round agreed on: \(.measured_order); contradicted by the prediction: \(.contradicted)); strict: \(if .top3_strict_match then "the same" else "differs" end)"' "$out/result.json"
echo "bench: results in $out/result.json" >&2
