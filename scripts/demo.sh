#!/usr/bin/env bash
# Sets up and builds memtrain, tokenizes the English text of Debian's `fortunes` package with GPT-2's BPE, and
# trains a small GPT-2 on it for 200 steps on the CPU, printing the memory plan and planned-vs-measured bytes.
# Output: run/demo/metrics.jsonl, memory.json, memory_timeline.json and report.svg (the picture of both).
# DEMO_MODEL=llama-demo trains the LLaMA-family demo model (RMSNorm, RoPE, SwiGLU, 4 query heads on 2 KV heads)
# on the same data instead.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

data=run/demo-data
if [ ! -f "$data/fortunes_train_000000.bin" ]; then
  # The plain-text fortune files (not the .dat indexes, not the .u8 symlinks).
  mapfile -t texts < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
  build/memtrain prepare "${texts[@]}" --out "$data" --name fortunes
fi

build/memtrain train --model "${DEMO_MODEL:-gpt2-demo}" --data "$data" --seq-length 128 --micro-batch-size 8 \
  --train-iters 200 --lr 2e-3 --min-lr 2e-4 --lr-warmup-iters 20 \
  --eval-interval 50 --eval-iters 8 --log-interval 10 --memory-report --memory-timeline --out run/demo "$@"
build/memtrain report run/demo
