#!/usr/bin/env bash
# Fine-tunes the demo's model with LoRA and with QLoRA on instruction records made from the same bundled text:
# each fortune of Debian's `fortunes` package with two or more lines becomes a record whose prompt is its first
# line and whose completion is the rest, so the loss counts the completions only; the records are packed into
# sequences of 256 tokens. The base is scripts/demo.sh's trained model (trained first if run/demo has no
# weights). Each run prints its memory report (planned and measured bytes) and its losses.
# Output: run/demo-lora (with its PEFT adapter in run/demo-lora/adapter) and run/demo-qlora.
set -euo pipefail
cd "$(dirname "$0")/.."

base=run/demo/model.safetensors
[ -f "$base" ] || scripts/demo.sh --save-weights "$base"

records=run/demo-sft.jsonl data=run/demo-sft-data
if [ ! -f "$data/data_train_000000.bin" ]; then
  /usr/bin/python3 - "$records" <<'PY'
import json, pathlib, sys
texts = sorted(p for p in pathlib.Path("/usr/share/games/fortunes").iterdir()
               if p.is_file() and p.suffix not in (".dat", ".u8"))
with open(sys.argv[1], "w") as out:
    for text in texts:
        for fortune in text.read_text(errors="replace").split("\n%\n"):
            lines = [line for line in fortune.strip("\n").split("\n") if line.strip()]
            if len(lines) >= 2 and len(fortune) < 300:
                out.write(json.dumps({"prompt": lines[0] + "\n", "completion": "\n".join(lines[1:])}) + "\n")
PY
  build/memtrain prepare --jsonl "$records" --pack --seq-length 256 --out "$data"
fi

common=(--model gpt2-demo --init-from "$base" --data "$data" --seq-length 256 --micro-batch-size 4
        --train-iters 100 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 10 --eval-interval 25 --eval-iters 8
        --log-interval 10 --lora-rank 16 --lora-alpha 32 --memory-report)
build/memtrain train "${common[@]}" --out run/demo-lora --save-adapter run/demo-lora/adapter "$@"
build/memtrain train "${common[@]}" --base-quant nf4 --out run/demo-qlora "$@"
