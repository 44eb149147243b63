#!/usr/bin/env bash
# Trains GPT-2 124M with memtrain and with plain PyTorch on the same tokens, one after the other, and
# prints their throughput and peak RSS side by side. Run from anywhere after scripts/setup.sh.
#   STEPS     memtrain steps; PyTorch runs SKIP warmup + STEPS-SKIP timed steps (default 6)
#   SKIP      leading steps left out of the medians (default 2)
#   THREADS   threads for both (default 2)
#   B, T      micro-batch size and sequence length (default 4, 256)
#   OUT       where data, logs and results go (default: outside the tree, under TMPDIR)
#   MEMTRAIN  the memtrain binary (default build/memtrain)
set -euo pipefail
cd "$(dirname "$0")/.."

steps="${STEPS:-6}"
skip="${SKIP:-2}"
threads="${THREADS:-2}"
batch="${B:-4}"
seq="${T:-256}"
out="${OUT:-${TMPDIR:-/tmp}/memtrain-bench-gpt2}"
memtrain="${MEMTRAIN:-build/memtrain}"
# The pyenv python3 first on PATH has no torch; Debian's has 1.13.
python=/usr/bin/python3

if [ "$steps" -le "$skip" ]; then
  echo "bench: STEPS ($steps) must exceed SKIP ($skip)" >&2
  exit 1
fi
[ -x "$memtrain" ] || { echo "bench: $memtrain not found, run scripts/setup.sh" >&2; exit 1; }
command -v jq >/dev/null || { echo "bench: needs jq (apt-get install -y jq)" >&2; exit 1; }

data="$out/data"
shards=("$data"/fortunes_train_*.bin)
if [ ! -f "${shards[0]}" ]; then
  # The fortune texts, without their .dat indexes and .u8 duplicates.
  texts=()
  for f in /usr/share/games/fortunes/*; do
    case "$f" in *.dat | *.u8) ;; *) texts+=("$f") ;; esac
  done
  mkdir -p "$data"
  "$memtrain" prepare "${texts[@]}" --out "$data" --name fortunes >&2
  shards=("$data"/fortunes_train_*.bin)
fi
shard="${shards[0]}"

# The machine may be shared: the load average says how much the two runs competed for the cores.
echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg); memtrain, $steps steps (B=$batch T=$seq, $threads threads)" >&2
rm -rf "$out/memtrain"
"$memtrain" train --model gpt2 --data "$data" --seq-length "$seq" --micro-batch-size "$batch" \
  --threads "$threads" --train-iters "$steps" --eval-interval 0 --no-shuffle --out "$out/memtrain" \
  > "$out/memtrain.log"
mt_steps="$(jq -s -c --argjson skip "$skip" '[.[] | select(.step > $skip) | .tokens_per_sec] | sort' \
  "$out/memtrain/metrics.jsonl")"
mt_tps="$(jq 'if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end' \
  <<< "$mt_steps")"
# Other jobs only ever slow a step down, so the fastest step is the least disturbed estimate.
mt_best="$(jq 'max' <<< "$mt_steps")"
mt_rss="$(jq .peak_rss_bytes "$out/memtrain/memory.json")"

echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg); PyTorch, $skip warmup + $((steps - skip)) timed steps" >&2
"$python" bench/torch_gpt2.py --shard "$shard" --batch "$batch" --seq "$seq" --threads "$threads" \
  --warmup "$skip" --steps "$((steps - skip))" > "$out/torch.json" 2> "$out/torch.log"
pt_tps="$(jq .tokens_per_sec "$out/torch.json")"
pt_best="$(jq '.batch * .seq / (.step_ms | min) * 1000' "$out/torch.json")"
pt_rss="$(jq .peak_rss_bytes "$out/torch.json")"

jq -n --argjson mt_tps "$mt_tps" --argjson pt_tps "$pt_tps" --argjson mt_best "$mt_best" --argjson pt_best "$pt_best" \
  --argjson mt_rss "$mt_rss" --argjson pt_rss "$pt_rss" \
  '{memtrain: {tokens_per_sec: $mt_tps, best_step_tokens_per_sec: $mt_best, peak_rss_bytes: $mt_rss},
    pytorch: {tokens_per_sec: $pt_tps, best_step_tokens_per_sec: $pt_best, peak_rss_bytes: $pt_rss},
    tokens_per_sec_ratio: ($mt_tps / $pt_tps), best_step_ratio: ($mt_best / $pt_best),
    peak_rss_ratio: ($mt_rss / $pt_rss)}' > "$out/result.json"

gib() { jq -n --argjson b "$1" '$b / 1073741824 * 100 | round / 100'; }
printf '%-10s %12s %20s %15s\n' "" "tokens/s" "best-step tokens/s" "peak RSS (GiB)"
printf '%-10s %12.1f %20.1f %15s\n' memtrain "$mt_tps" "$mt_best" "$(gib "$mt_rss")"
printf '%-10s %12.1f %20.1f %15s\n' PyTorch "$pt_tps" "$pt_best" "$(gib "$pt_rss")"
printf '%-10s %11.2fx %19.2fx %14.2fx\n' ratio "$(jq .tokens_per_sec_ratio "$out/result.json")" \
  "$(jq .best_step_ratio "$out/result.json")" "$(jq .peak_rss_ratio "$out/result.json")"
echo "(tokens/s: median of the steps after the first $skip; ratio = memtrain / PyTorch; details in $out)"
