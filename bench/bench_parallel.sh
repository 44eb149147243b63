#!/usr/bin/env bash
# Data, tensor and pipeline parallelism on two ranks of one thread each: GPT-2 124M in bf16, one global batch of
# GLOBAL sequences a step in micro-batches of MICRO sequences for every layout, as D=2 (ZeRO 0 and ZeRO-1, each
# rank half the micro-batches), T=2 (both ranks every micro-batch, each half of every layer; also with sequence
# parallelism) and P=2 (rank 0 the first 6 layers and the embedding, rank 1 the last 6 and the head, every
# micro-batch through both under 1F1B). ROUNDS rounds each run every layout once for STEPS steps, the first SKIP
# left out, so that a slow spell of the shared machine slows one run of every layout; then per layout: the
# medians of tokens/s, step time and rank 0's comm_ms and comm_exposed_ms; both ranks' planned and measured
# bytes of model states, activations and in total; the kernels alone (predict_step --measure-ops: each stage's
# graph in one process, exchanges left out, the slowest stage's) and the step's time beyond them; and the cost
# model's prediction (predict_step, as `memtrain plan` makes it, from a profile calibrated as two ranks of one
# thread). Also this machine's FMA peak (fma_peak) and the calibrated memory and MPI bandwidths. Run from
# anywhere after scripts/setup.sh.
#   LAYOUTS    which, in order (default "dp2-zero0 dp2-zero1 tp2 tp2-sp pp2")
#   STEPS      steps per run; the first SKIP are warmup, left out (default 4)
#   SKIP       leading steps left out (default 1)
#   ROUNDS     rounds of all layouts, interleaved (default 2)
#   GLOBAL     sequences per step (default 16); MICRO sequences per micro-batch (default 4); T their length
#              (default 256)
#   OUT        where data, logs and results go (default: under TMPDIR)
#   MEMTRAIN   the memtrain binary (default build/memtrain; predict_step and fma_peak from the same build)
#   WAIT_MAX   seconds to wait before each run while another benchmark runs (default 120)
set -euo pipefail
cd "$(dirname "$0")/.."

layouts="${LAYOUTS:-dp2-zero0 dp2-zero1 tp2 tp2-sp pp2}"
steps="${STEPS:-4}"
skip="${SKIP:-1}"
rounds="${ROUNDS:-2}"
global="${GLOBAL:-16}"
batch="${MICRO:-4}"
seq="${T:-256}"
out="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-parallel}"
memtrain="${MEMTRAIN:-build/memtrain}"
predict="$(dirname "$memtrain")/bench/predict_step"
fma_peak="$(dirname "$memtrain")/bench/fma_peak"
export WAIT_MAX="${WAIT_MAX:-120}"
# One OpenMP thread per rank: the two ranks share the machine's two cores.
export OMP_NUM_THREADS=1
threads=1 ranks=2 model=gpt2

# NAME -> "DP TP PP SP ZERO_STAGE": data-parallel ranks, tensor-parallel ranks, pipeline stages (DP x TP x PP = 2),
# sequence parallel (0 or 1), ZeRO stage.
declare -A spec=([dp2-zero0]="2 1 1 0 0" [dp2-zero1]="2 1 1 0 1" [tp2]="1 2 1 0 0" [tp2-sp]="1 2 1 1 0"
  [pp2]="1 1 2 0 0")

# shellcheck source=bench/lib.sh
source bench/lib.sh
configs="" && declare -A flags=()  # check_inputs' configuration checks: the layouts are checked here
check_inputs
for l in $layouts; do
  [ -n "${spec[$l]+set}" ] || die "unknown layout '$l' in LAYOUTS (known: ${!spec[*]})"
  read -r dp _ <<< "${spec[$l]}"
  [ $((global % (dp * batch))) -eq 0 ] || die "GLOBAL ($global) is not a multiple of $l's $dp x MICRO ($batch)"
done
[ -x "$predict" ] || die "$predict not found: ninja -C build predict_step"
[ -x "$fma_peak" ] || die "$fma_peak not found: ninja -C build fma_peak"
command -v mpirun >/dev/null || die "mpirun not found (run scripts/setup.sh)"

mkdir -p "$out"
prepare_data
wait_for_quiet_machine
peak="$("$fma_peak" --threads 1)" || die "$fma_peak failed"
# As the runs: two ranks of one thread, which also measures the MPI bandwidth the exchanges are priced at.
mpirun --allow-run-as-root --oversubscribe -np 2 "$memtrain" calibrate --threads 1 --scratch-dir "$out" \
  --out "$out/profile.np2.json" >&2

# The kernels of layout $1 alone, and its prediction, into OUT/$1.predicted.json and OUT/$1.kernels.json.
predict_layout() {
  local dp tp pp sp stage accum model_parallel
  read -r dp tp pp sp stage <<< "${spec[$1]}"
  accum=$((global / (dp * batch)))
  model_parallel=(--tp "$tp" --sequence-parallel "$sp" --pp "$pp")
  "$predict" --ranks "$dp" --zero-stage "$stage" "${model_parallel[@]}" "$out/profile.np2.json" "$model" "$batch" \
    "$seq" 1 "$accum" bf16 none > "$out/$1.predicted.json"
  wait_for_quiet_machine
  "$predict" --measure-ops 3 "${model_parallel[@]}" "$out/profile.np2.json" "$model" "$batch" "$seq" 1 "$accum" \
    bf16 none > "$out/$1.kernels.json"
}
for l in $layouts; do predict_layout "$l"; done

read -r -a order <<< "$layouts"
for ((round = 1; round <= rounds; round++)); do
  # Each round starts one layout further along, so none always runs first.
  shift_by=$(((round - 1) % ${#order[@]}))
  for l in "${order[@]:shift_by}" "${order[@]:0:shift_by}"; do
    read -r dp tp pp sp stage <<< "${spec[$l]}"
    sequence_parallel=()
    [ "$sp" -eq 1 ] && sequence_parallel=(--sequence-parallel)
    RANKS=$ranks run_memtrain "$l.round$round" --bf16 --global-batch-size "$global" --zero-stage "$stage" \
      --tensor-model-parallel-size "$tp" --pipeline-model-parallel-size "$pp" "${sequence_parallel[@]}"
  done
done

# Per layout over all its rounds: medians, both ranks' bytes, the kernels alone and the prediction.
rows=()
for l in $layouts; do
  metrics=()
  for ((round = 1; round <= rounds; round++)); do metrics+=("$out/$l.round$round/metrics.jsonl"); done
  rows+=("$(jq -c -s --arg name "$l" --arg spec "${spec[$l]}" --argjson skip "$skip" \
    --slurpfile memory <(cat "$out/$l.round1/memory.rank0.json" "$out/$l.round1/memory.rank1.json") \
    --slurpfile predicted "$out/$l.predicted.json" \
    --slurpfile kernels "$out/$l.kernels.json" --slurpfile runs <(cat "$out/$l".round*.json) '
    def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    def states: .params + (.frozen // 0) + .master + .grads + .optim;
    def both(f): [$memory[] | {planned: (.planned | f), measured: (.measured | f)}];
    [.[] | select(.step > $skip)] as $timed
    | ($kernels[0].stages | map(map(select(.op != "optimizer") | .measured_ms) | add)) as $stages_ms
    | {name: $name, dp_tp_pp_sp_zero: $spec, load_average: [$runs[].load_average],
       tokens_per_sec: ($timed | map(.tokens_per_sec) | median), step_ms: ($timed | map(.step_ms) | median),
       steps_ms: ($timed | map(.step_ms)),
       comm_ms: ($timed | map(.comm_ms // 0) | median), comm_exposed_ms: ($timed | map(.comm_exposed_ms // 0) | median),
       model_states: both(states), activations: both(.activations), total: both(add),
       kernels_ms: ($stages_ms | max), stage_kernels_ms: $stages_ms, predicted: $predicted[0]}
    | . + {beyond_kernels_ms: (.step_ms - .kernels_ms),
           predicted_beyond_kernels_ms: ($predicted[0]
             | .optimizer_ms + .comm_exposed_ms + .tp_comm_ms + .pp_comm_ms + .bubble_ms),
           error: (($predicted[0].step_ms - .step_ms) / .step_ms)}' "${metrics[@]}")")
done
printf '%s\n' "${rows[@]}" | jq -s --argjson peak "$peak" --slurpfile profile "$out/profile.np2.json" \
  --arg cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -n1)" \
  '{cpu: $cpu, fma_peak: $peak, memory_gbps: $profile[0].memory_gbps, mpi_gbps: $profile[0].mpi_gbps,
    layouts: .}' > "$out/result.json"

jq -r '"CPU: \(.cpu); FMA peak \(.fma_peak.gflops | round) GFLOP/s at \(.fma_peak.isa), 1 thread"
  + "\(if .fma_peak.bf16_gflops then "; bf16 dot products \(.fma_peak.bf16_gflops | round) GFLOP/s" else "" end)"
  + "; memory \(.memory_gbps * 10 | round / 10) GB/s, MPI \(.mpi_gbps * 100 | round / 100) GB/s (calibrate, 2 ranks x 1 thread)"' \
  "$out/result.json"
{ printf '| layout | D T P SP ZeRO | tokens/s | step ms | comm ms | comm exposed ms | kernels alone ms | step - kernels ms | predicted step ms (error) | predicted optimizer + exposed comm + TP/PP comm + bubble ms | model states MiB rank 0; rank 1 | activations MiB rank 0; rank 1 | total MiB rank 0; rank 1 | load avg |\n'
  printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
  jq -r 'def mib: . / 1048576 * 10 | round / 10; def r: . * 10 | round / 10;
    def both: map("\(.planned | mib)\(if .planned == .measured then " (=)" else " (measured \(.measured | mib))" end)") | join("; ");
    .layouts[] | "| \(.name) | \(.dp_tp_pp_sp_zero) | \(.tokens_per_sec | round) | \(.step_ms | round) | \(.comm_ms | r) | \(.comm_exposed_ms | r) | \(.stage_kernels_ms | map(round) | join(" / ")) | \(.beyond_kernels_ms | round) | \(.predicted.step_ms | round) (\(.error * 100 | round)%) | \(.predicted_beyond_kernels_ms | round) (TP \(.predicted.tp_comm_ms | r), PP \(.predicted.pp_comm_ms | r), bubble \(.predicted.bubble_ms | round) = \(.predicted.bubble_fraction * 100 | round)%) | \(.model_states | both) | \(.activations | both) | \(.total | both) | \(.load_average | join("; ")) |"' \
    "$out/result.json"
}
echo
echo "(bf16, 2 ranks x 1 thread, $global sequences of $seq tokens a step in micro-batches of $batch; medians of steps"
echo " $((skip + 1))-$steps over $rounds rounds; comm: rank 0's communicator busy, with the data-parallel exchanges and,"
echo " at T=2 or P=2, the ops' all-reduces, gathers or sends (waiting for the peer included); comm exposed: the part"
echo " of it the step waited for; kernels alone: the layout's forward and backward ops of a step timed in one process,"
echo " exchanges left out (P=2: each stage, the step minus the slower); bytes: planned, (=) when measured equals it;"
echo " details in $out)"
