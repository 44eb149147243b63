#!/usr/bin/env bash
# Data parallel against tensor parallel on two ranks of one thread each: GPT-2 124M in bf16, one global batch
# of GLOBAL sequences a step, as D=2 (ZeRO 0 and ZeRO-1, each rank half the batch) and as T=2 (both ranks the
# whole batch, each half of every layer). ROUNDS rounds each run every layout once for STEPS steps, the first
# SKIP left out, so that a slow spell of the shared machine slows one run of every layout; then per layout:
# the medians of tokens/s, step time and the trainer's comm_ms and comm_exposed_ms; rank 0's planned and
# measured bytes of model states, activations and in total; the kernels alone (predict_step --measure-ops:
# the same graph in one process, exchanges left out) and the step's time beyond them; and the cost model's
# prediction (predict_step from a profile calibrated as two ranks of one thread). Also this machine's FMA
# peak (fma_peak) and the calibrated memory and MPI bandwidths. Run from anywhere after scripts/setup.sh.
#   LAYOUTS    which, in order (default "dp2-zero0 dp2-zero1 tp2")
#   STEPS      steps per run; the first SKIP are warmup, left out (default 4)
#   SKIP       leading steps left out (default 1)
#   ROUNDS     rounds of all layouts, interleaved (default 2)
#   GLOBAL, T  sequences per step and sequence length (default 4, 256)
#   OUT        where data, logs and results go (default: under TMPDIR)
#   MEMTRAIN   the memtrain binary (default build/memtrain; predict_step and fma_peak from the same build)
#   WAIT_MAX   seconds to wait before each run while another benchmark runs (default 120)
set -euo pipefail
cd "$(dirname "$0")/.."

layouts="${LAYOUTS:-dp2-zero0 dp2-zero1 tp2}"
steps="${STEPS:-4}"
skip="${SKIP:-1}"
rounds="${ROUNDS:-2}"
global="${GLOBAL:-4}"
seq="${T:-256}"
out="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-parallel}"
memtrain="${MEMTRAIN:-build/memtrain}"
predict="$(dirname "$memtrain")/bench/predict_step"
fma_peak="$(dirname "$memtrain")/bench/fma_peak"
export WAIT_MAX="${WAIT_MAX:-120}"
# One OpenMP thread per rank: the two ranks share the machine's two cores.
export OMP_NUM_THREADS=1
threads=1 ranks=2 model=gpt2

# NAME -> "DP TP ZERO_STAGE": data-parallel ranks, tensor-parallel ranks (DP x TP = 2), ZeRO stage.
declare -A spec=([dp2-zero0]="2 1 0" [dp2-zero1]="2 1 1" [tp2]="1 2 0")

# shellcheck source=bench/lib.sh
source bench/lib.sh
configs="" && declare -A flags=()  # check_inputs' configuration checks: the layouts are checked here
check_inputs
for l in $layouts; do
  [ -n "${spec[$l]+set}" ] || die "unknown layout '$l' in LAYOUTS (known: ${!spec[*]})"
  read -r dp _ _ <<< "${spec[$l]}"
  [ $((global % dp)) -eq 0 ] || die "GLOBAL ($global) is not a multiple of $l's $dp data-parallel ranks"
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
  local dp tp stage micro
  read -r dp tp stage <<< "${spec[$1]}"
  micro=$((global / dp))
  "$predict" --ranks "$dp" --zero-stage "$stage" --tp "$tp" "$out/profile.np2.json" "$model" "$micro" "$seq" 1 1 \
    bf16 none > "$out/$1.predicted.json"
  wait_for_quiet_machine
  "$predict" --measure-ops 3 --tp "$tp" "$out/profile.np2.json" "$model" "$micro" "$seq" 1 1 bf16 none \
    > "$out/$1.kernels.json"
}
for l in $layouts; do predict_layout "$l"; done

read -r -a order <<< "$layouts"
for ((round = 1; round <= rounds; round++)); do
  # Each round starts one layout further along, so none always runs first.
  shift_by=$(((round - 1) % ${#order[@]}))
  for l in "${order[@]:shift_by}" "${order[@]:0:shift_by}"; do
    read -r dp tp stage <<< "${spec[$l]}"
    (batch=$((global / dp)) RANKS=$ranks run_memtrain "$l.round$round" --bf16 --zero-stage "$stage" \
      --tensor-model-parallel-size "$tp")
  done
done

# Per layout over all its rounds: medians, rank 0's bytes, the kernels alone and the prediction.
rows=()
for l in $layouts; do
  metrics=() memory=()
  for ((round = 1; round <= rounds; round++)); do
    metrics+=("$out/$l.round$round/metrics.jsonl")
    memory+=("$out/$l.round$round/memory.rank0.json")
  done
  rows+=("$(jq -c -s --arg name "$l" --arg spec "${spec[$l]}" --argjson skip "$skip" \
    --slurpfile memory "${memory[0]}" --slurpfile predicted "$out/$l.predicted.json" \
    --slurpfile kernels "$out/$l.kernels.json" --slurpfile runs <(cat "$out/$l".round*.json) '
    def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    def states: .params + (.frozen // 0) + .master + .grads + .optim;
    [.[] | select(.step > $skip)] as $timed | $memory[0] as $m
    | ($kernels[0].ops | map(select(.op != "optimizer") | .measured_ms) | add) as $kernels_ms
    | {name: $name, dp_tp_stage: $spec, load_average: [$runs[].load_average],
       tokens_per_sec: ($timed | map(.tokens_per_sec) | median), step_ms: ($timed | map(.step_ms) | median),
       comm_ms: ($timed | map(.comm_ms // 0) | median), comm_exposed_ms: ($timed | map(.comm_exposed_ms // 0) | median),
       model_states: {planned: ($m.planned | states), measured: ($m.measured | states)},
       activations: {planned: $m.planned.activations, measured: $m.measured.activations},
       total: {planned: ($m.planned | add), measured: ($m.measured | add)},
       kernels_ms: $kernels_ms, predicted: $predicted[0]}
    | . + {beyond_kernels_ms: (.step_ms - .kernels_ms),
           predicted_beyond_kernels_ms: ($predicted[0] | .optimizer_ms + .comm_exposed_ms + .tp_comm_ms),
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
{ printf '| layout | D T ZeRO | tokens/s | step ms | comm ms | comm exposed ms | kernels alone ms | step - kernels ms | predicted step ms (error) | predicted optimizer + exposed comm + TP comm ms | model states MiB planned / measured | activations MiB planned / measured | total MiB planned / measured | load avg |\n'
  printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
  jq -r 'def mib: . / 1048576 * 10 | round / 10; def r: . * 10 | round / 10;
    def both: "\(.planned | mib) / \(.measured | mib)\(if .planned == .measured then " (=)" else " (DIFFER)" end)";
    .layouts[] | "| \(.name) | \(.dp_tp_stage) | \(.tokens_per_sec | round) | \(.step_ms | round) | \(.comm_ms | r) | \(.comm_exposed_ms | r) | \(.kernels_ms | round) | \(.beyond_kernels_ms | round) | \(.predicted.step_ms | round) (\(.error * 100 | round)%) | \(.predicted_beyond_kernels_ms | round) (TP \(.predicted.tp_comm_ms | r)) | \(.model_states | both) | \(.activations | both) | \(.total | both) | \(.load_average | join("; ")) |"' \
    "$out/result.json"
}
echo
echo "(bf16, 2 ranks x 1 thread, $global sequences of $seq tokens a step; medians of steps $((skip + 1))-$steps over"
echo " $rounds rounds; comm: rank 0's communicator busy, with the data-parallel exchanges and, at T=2, the ops'"
echo " all-reduces (waiting for the peer included); comm exposed: the data-parallel exchanges' waited-for part"
echo " only; kernels alone: the layout's forward and backward ops timed in one process, exchanges left out;"
echo " bytes: rank 0's memory report; details in $out)"
