#!/usr/bin/env bash
# Trains GPT-2 124M data-parallel over N ranks (mpirun, one process each) with every ZeRO stage, then with
# PyTorch's peers of stages 0 and 1 (bench/torch_zero.py), one run after the other on the same tokens, and
# prints per rank: planned and measured model-state bytes per parameter, planned total, peak RSS, and the
# run's tokens/s and the share of step time spent in the data-parallel exchanges; then memtrain / PyTorch
# ratios of tokens/s and per-rank peak RSS. Run from anywhere after scripts/setup.sh.
#   STAGES     ZeRO stages to run, in order (default "0 1 2 3")
#   TORCH      PyTorch peers to run after them: ddp (of stage 0), zero1 (of stage 1) (default "ddp zero1")
#   OVERLAP    on, off, or "on off": exchanges alongside the kernels, or each waited for (default "on off")
#   RANKS      data-parallel ranks (default 2)
#   PRECISION  fp32 or bf16 (default bf16)
#   STEPS      steps per run; the first SKIP are warmup, left out of the medians (default 4)
#   SKIP       leading steps left out of the medians (default 1)
#   THREADS    OpenMP threads per rank (default 1: the ranks share the cores)
#   B, T       micro-batch size per rank and sequence length (default 2, 256)
#   OUT        where data, logs and results go (default: outside the tree, under TMPDIR)
#   MEMTRAIN   the memtrain binary (default build/memtrain)
#   WAIT_MAX   seconds to wait before each run while another benchmark runs (default 900)
set -euo pipefail
cd "$(dirname "$0")/.."

stages="${STAGES:-0 1 2 3}"
overlaps="${OVERLAP:-on off}"
ranks="${RANKS:-2}"
precision="${PRECISION:-bf16}"
steps="${STEPS:-4}"
skip="${SKIP:-1}"
threads="${THREADS:-1}"
batch="${B:-2}"
seq="${T:-256}"
out="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-zero-$precision}"
memtrain="${MEMTRAIN:-build/memtrain}"
torch_modes="${TORCH-ddp zero1}"
# The pyenv python3 first on PATH has no torch; Debian's has 1.13.
python=/usr/bin/python3

# shellcheck source=bench/lib.sh
source bench/lib.sh

case "$precision" in
  fp32) precision_flags=() torch_autocast=off ;;
  bf16) precision_flags=(--bf16) torch_autocast=bf16 ;;
  *) die "PRECISION must be fp32 or bf16, not '$precision'" ;;
esac
command -v mpirun >/dev/null || die "mpirun not found (run scripts/setup.sh)"
configs="" && declare -A flags=()  # check_inputs' configuration checks: none here
check_inputs
# The ZeRO stage each PyTorch mode is the peer of.
declare -A peer_of_stage=([ddp]=0 [zero1]=1)
for m in $torch_modes; do
  [ -n "${peer_of_stage[$m]+set}" ] || die "unknown mode '$m' in TORCH (known: ${!peer_of_stage[*]})"
done

# run_stage K on|off: STEPS steps at ZeRO stage K into OUT/stageK-on|off; summary in OUT/stageK-on|off.json.
run_stage() {
  local name="stage$1-$2" dir="$out/stage$1-$2" load overlap_flag=--overlap-comm
  [ "$2" = on ] || overlap_flag=--no-overlap-comm
  wait_for_quiet_machine
  load="$(load_average)"
  echo "bench: load average $load; $name: mpirun -np $ranks memtrain train --zero-stage $1 $overlap_flag" >&2
  rm -rf "$dir"
  if ! mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$memtrain" train --model gpt2 \
      --data "$out/data" --seq-length "$seq" --micro-batch-size "$batch" --threads "$threads" \
      --train-iters "$steps" --eval-interval 0 --no-shuffle --out "$dir" --zero-stage "$1" "$overlap_flag" \
      "${precision_flags[@]}" > "$dir.log" 2>&1; then
    tail -n 5 "$dir.log" >&2
    die "$name failed, log in $dir.log"
  fi
  jq -s '.' "$dir"/memory.rank*.json > "$dir/ranks.json"
  jq -s --arg name "$name" --argjson stage "$1" --arg overlap "$2" --arg load "$load" \
    --arg load_end "$(load_average)" --argjson skip "$skip" --slurpfile ranks "$dir/ranks.json" '
    [.[] | select(.step > $skip)] as $timed
    | {name: $name, stage: $stage, overlap: $overlap, load_average: $load, load_average_end: $load_end,
       steps: [$timed[] | .tokens_per_sec],
       comm_share: (($timed | map(.comm_ms) | add) / ($timed | map(.step_ms) | add)),
       exposed_comm_share: (($timed | map(.comm_exposed_ms) | add) / ($timed | map(.step_ms) | add)),
       losses: [.[] | .loss],
       ranks: [$ranks[0][] | {planned_bytes: (.planned | add), measured_equals_planned: (.planned == .measured),
                              model_state_bytes_per_param: .model_state_bytes_per_param.measured,
                              peak_rss_bytes: .peak_rss_bytes, planned: .planned}]}' \
    "$dir/metrics.jsonl" | summarize > "$dir.json"
}

# run_torch_zero MODE: bench/torch_zero.py in MODE on RANKS ranks into OUT/torch-MODE.json, with the fields
# of a stage's summary that PyTorch has (no plan, no comm timing).
run_torch_zero() {
  local name="torch-$1" load
  rm -f "$out/$name.rendezvous"
  launch_torch "$name" mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$python" bench/torch_zero.py \
    --mode "$1" --autocast "$torch_autocast" --rendezvous "$out/$name.rendezvous"
  jq --arg name "$name" --argjson stage "${peer_of_stage[$1]}" --arg load "$load" --arg load_end "$(load_average)" \
    '{name: $name, engine: ("PyTorch " + .torch_version), mode, peer_of_stage: $stage, load_average: $load,
      load_average_end: $load_end, steps: [.world * .batch * .seq / .step_ms[] * 1000], losses, ranks}' \
    "$out/$name.raw.json" | summarize > "$out/$name.json"
}

print_table() {
  local files=() m
  for s in $stages; do for o in $overlaps; do files+=("$out/stage$s-$o.json"); done; done
  for m in $torch_modes; do files+=("$out/torch-$m.json"); done
  # Each memtrain run of a stage PyTorch ran the peer of, divided by that peer.
  jq -s '(map(select(.mode) | {key: (.peer_of_stage | tostring), value: .}) | from_entries) as $peers
    | {runs: .,
       ratios: [.[] | select(.mode | not) | . as $m | $peers[.stage | tostring] // empty | . as $t
                | {memtrain: $m.name, torch: $t.name, tokens_per_sec: ($m.tokens_per_sec / $t.tokens_per_sec),
                   best_step_tokens_per_sec: ($m.best_step_tokens_per_sec / $t.best_step_tokens_per_sec),
                   peak_rss_per_rank: [range(0; $m.ranks | length) as $i
                                       | $m.ranks[$i].peak_rss_bytes / $t.ranks[$i].peak_rss_bytes],
                   steady: ($m.steady and $t.steady)}]}' "${files[@]}" > "$out/result.json"
  echo
  { printf 'stage\toverlap\trank\tstates B/param\tplanned MiB\tcomm MiB\tpeak RSS MiB\tmeasured == planned\ttokens/s\tcomm share\texposed\tsteady\tload avg\n'
    jq -r 'def mib: if . == null then "-" else . / 1048576 | . * 10 | round / 10 end;
      def pct: if . == null then "-" else . * 100 | round | tostring + "%" end;
      .runs[] | . as $r | range(0; .ranks | length) as $i | .ranks[$i] as $k
      | [(if $r.mode then "torch " + $r.mode else $r.stage end), ($r.overlap // "-"), $i,
         ($k.model_state_bytes_per_param * 100 | round / 100), ($k.planned_bytes | mib), ($k.planned.comm | mib),
         ($k.peak_rss_bytes | mib), ($k.measured_equals_planned | if . == null then "-" else . end),
         ($r.tokens_per_sec | round), ($r.comm_share | pct), ($r.exposed_comm_share | pct),
         (if $r.steady then "yes" else "NO" end), "\($r.load_average) -> \($r.load_average_end)"] | @tsv' \
      "$out/result.json"
  } | column -t -s $'\t'
  echo
  echo "($precision, $ranks ranks x $threads thread(s), B=$batch per rank, T=$seq; tokens/s: all ranks, median of"
  echo " steps $((skip + 1))-$steps; comm share: rank 0's time in the data-parallel exchanges (on the comm"
  echo " worker) over step time; exposed: the part the step waited for, not hidden by kernels; details in $out)"
  [ -n "$torch_modes" ] || return 0
  echo
  { printf 'memtrain / PyTorch\ttokens/s\tbest-step tokens/s\tpeak RSS per rank\tsteady\n'
    jq -r 'def r2: . * 100 | round / 100;
      .ratios[] | ["\(.memtrain) / \(.torch)", (.tokens_per_sec | r2), (.best_step_tokens_per_sec | r2),
                   (.peak_rss_per_rank | map(r2 | tostring) | join(" ")), (if .steady then "yes" else "NO" end)]
      | @tsv' "$out/result.json"
  } | column -t -s $'\t'
}

main() {
  mkdir -p "$out"
  prepare_data
  for s in $stages; do for o in $overlaps; do run_stage "$s" "$o"; done; done
  for m in $torch_modes; do run_torch_zero "$m"; done
  print_table
}

main
