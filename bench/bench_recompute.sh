#!/usr/bin/env bash
# Trains GPT-2 124M with each activation-recompute mode of memtrain, and PyTorch with and without
# torch.utils.checkpoint around each block, one run after the other on the same tokens, and prints each
# run's activation memory, peak RSS and throughput, relative to its engine's run without recompute, and
# memtrain against PyTorch for the comparable modes. Run from anywhere after scripts/setup.sh.
#   CONFIGS    which runs, in order (default: all six below, space- or comma-separated)
#                memtrain-none           memtrain train (keeps every activation)
#                memtrain-selective      --recompute-granularity selective
#                memtrain-full-uniform1  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
#                memtrain-full-block6    --recompute-granularity full --recompute-method block --recompute-num-layers 6
#                torch-none              torch_gpt2.py
#                torch-checkpoint        torch_gpt2.py --checkpoint (torch.utils.checkpoint per block)
#   PRECISION  fp32 or bf16 (memtrain --bf16, PyTorch --autocast bf16) for every run (default fp32)
#   STEPS      steps per run; the first SKIP are warmup, left out of the medians (default 4)
#   SKIP       leading steps left out of the medians (default 1)
#   THREADS    threads for all runs (default 2)
#   B, T       micro-batch size and sequence length (default 8, 512: activations dominate memory)
#   OUT        where data, logs and results go (default: outside the tree, under TMPDIR)
#   MEMTRAIN   the memtrain binary (default build/memtrain)
#   WAIT_MAX   seconds to wait before each run while another benchmark runs (default 900)
set -euo pipefail
cd "$(dirname "$0")/.."

configs="${CONFIGS:-memtrain-none memtrain-selective memtrain-full-uniform1 memtrain-full-block6 torch-none torch-checkpoint}"
configs="${configs//,/ }"
precision="${PRECISION:-fp32}"
steps="${STEPS:-4}"
skip="${SKIP:-1}"
threads="${THREADS:-2}"
batch="${B:-8}"
seq="${T:-512}"
out="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-recompute-$precision}"
memtrain="${MEMTRAIN:-build/memtrain}"
# The pyenv python3 first on PATH has no torch; Debian's has 1.13.
python=/usr/bin/python3

# shellcheck source=bench/lib.sh
source bench/lib.sh

case "$precision" in
  fp32) memtrain_precision="" torch_precision="--autocast off" ;;
  bf16) memtrain_precision="--bf16" torch_precision="--autocast bf16" ;;
  *) die "PRECISION must be fp32 or bf16, not '$precision'" ;;
esac

# Each configuration's recompute flags; the precision's flags come first.
full="--recompute-granularity full --recompute-method"
declare -A flags=(
  [memtrain-none]=""
  [memtrain-selective]="--recompute-granularity selective"
  [memtrain-full-uniform1]="$full uniform --recompute-num-layers 1"
  [memtrain-full-block6]="$full block --recompute-num-layers 6"
  [torch-none]=""
  [torch-checkpoint]="--checkpoint"
)

check_inputs

# Each run against its engine's run without recompute (time: that run's tokens/s over this one's, so 1.33
# is a third slower), and memtrain against PyTorch for the modes that keep the same tensors: none with none,
# full recompute one layer at a time with a checkpoint around each block. A comparison whose runs did not
# both happen is left out.
write_result() {
  local files=()
  for c in $configs; do files+=("$out/$c.json"); done
  jq -s --argjson steps "$steps" --argjson skip "$skip" --argjson threads "$threads" \
    --argjson batch "$batch" --argjson seq "$seq" --arg precision "$precision" '
    (map({(.name): .}) | add) as $c
    | def base: if .engine == "memtrain" then "memtrain-none" else "torch-none" end;
    {settings: {model: "gpt2", precision: $precision, batch: $batch, seq: $seq, threads: $threads,
                steps: $steps, warmup_steps: $skip,
                # One B x T x C tensor of the residual stream in the precision of the activations.
                btc_bytes: ($batch * $seq * 768 * (if $precision == "bf16" then 2 else 4 end))},
     configs: ($c | map_values(. as $r | $c[$r | base] as $b | . + (if $b then {
       relative_time: ($b.tokens_per_sec / .tokens_per_sec),
       best_step_relative_time: ($b.best_step_tokens_per_sec / .best_step_tokens_per_sec),
       relative_peak_rss: (.peak_rss_bytes / $b.peak_rss_bytes),
       max_loss_difference: ([.losses, $b.losses] | transpose | map(.[0] - .[1] | fabs) | max)}
       else {} end))),
     comparisons: [["memtrain-none", "torch-none"], ["memtrain-full-uniform1", "torch-checkpoint"]]
       | map(select($c[.[0]] and $c[.[1]]) | $c[.[0]] as $m | $c[.[1]] as $t
             | {memtrain: .[0], torch: .[1],
                tokens_per_sec: ($m.tokens_per_sec / $t.tokens_per_sec),
                best_step_tokens_per_sec: ($m.best_step_tokens_per_sec / $t.best_step_tokens_per_sec),
                peak_rss: ($m.peak_rss_bytes / $t.peak_rss_bytes),
                steady: ($m.steady and $t.steady)})}' \
    "${files[@]}" > "$out/result.json"
}

print_table() {
  local r="$out/result.json"
  echo
  { printf 'config\tload avg\tact. arena MiB\tunpacked MiB\tfwd RSS growth MiB\tpeak RSS MiB\ttokens/s\tbest step\tsteady\ttime vs none\tbest-step time\tRSS vs none\tmax |loss diff|\n'
    jq -r 'def mib: if . == null then "-" else . / 1048576 | round end;
           def r2: if . == null then "-" else . * 100 | round / 100 end;
      .configs[] | [.name, "\(.load_average) -> \(.load_average_end)",
        (.activations_bytes | mib), (.activations_unpacked_bytes | mib), (.forward_rss_growth_bytes | mib),
        (.peak_rss_bytes | mib),
        (.tokens_per_sec * 10 | round / 10), (.best_step_tokens_per_sec * 10 | round / 10),
        (if .steady then "yes" else "NO" end),
        (.relative_time | r2), (.best_step_relative_time | r2), (.relative_peak_rss | r2),
        (.max_loss_difference // "-")] | @tsv' "$r"
  } | column -t -s $'\t'
  if [ "$(jq '.comparisons | length' "$r")" -gt 0 ]; then
    echo
    { printf 'memtrain / PyTorch\ttokens/s\tbest step\tpeak RSS\tsteady\n'
      jq -r '.comparisons[] | ["\(.memtrain) / \(.torch)", (.tokens_per_sec * 100 | round / 100),
          (.best_step_tokens_per_sec * 100 | round / 100), (.peak_rss * 100 | round / 100),
          (if .steady then "yes" else "NO" end)] | @tsv' "$r"
    } | column -t -s $'\t'
  fi
  echo
  echo "($precision, B=$batch, T=$seq, $threads threads; one B*T*C tensor: $(jq '.settings.btc_bytes / 1048576 | . * 10 | round / 10' "$r") MiB."
  echo " act. arena: memtrain's planned activation arena (packed), unpacked: the sum of its tensors;"
  echo " fwd RSS growth: PyTorch's resident memory after the forward less before it, a rough activation size;"
  echo " tokens/s: median of steps $((skip + 1))-$steps; steady: the median within 10% of the best step;"
  echo " time vs none: the engine's no-recompute tokens/s over this run's; details in $out)"
}

main() {
  mkdir -p "$out"
  prepare_data
  for c in $configs; do
    # shellcheck disable=SC2086  # the flags are words
    case "$c" in
      memtrain-*) run_memtrain "$c" $memtrain_precision ${flags[$c]} ;;
      torch-*) run_torch "$c" $torch_precision ${flags[$c]} ;;
    esac
  done
  write_result
  print_table
}

main
