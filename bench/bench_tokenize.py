"""memtrain tokenize's speed beside the reference's (@huggingface/tokenizers 0.2.0 in node), in one run, on the
fortunes text with Llama-3's tokenizer.json: MB of text per second, each on one core. Loading the tokenizer is
left out of both: memtrain's is the time `tokenize` takes on an empty file, taken off; the reference times its
encode calls alone. Also checks that both gave the same ids.

  python3 bench/bench_tokenize.py [--tokenizer DIR] [--repeat N] [--memtrain BIN]

Run from anywhere; the issue asks for >= 1 MB/s per core (issue 29, item 5).
"""
import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "third_party" / "node_modules"
REFERENCE = ROOT / "tests" / "cli" / "tokenizer_reference.mjs"


def timed(args: list) -> tuple:
    start = time.perf_counter()
    out = subprocess.run(args, capture_output=True, check=True).stdout
    return time.perf_counter() - start, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", type=Path, default=MODULES / "@lenml" / "tokenizer-llama3" / "models")
    parser.add_argument("--repeat", type=int, default=1, help="the fortunes text this many times over")
    parser.add_argument("--memtrain", type=Path, default=ROOT / "build" / "memtrain")
    args = parser.parse_args()
    fortunes = sorted(p for p in Path("/usr/share/games/fortunes").iterdir()
                      if p.is_file() and p.suffix not in (".dat", ".u8"))
    with tempfile.TemporaryDirectory() as work:
        text, empty = Path(work) / "fortunes.txt", Path(work) / "empty.txt"
        text.write_bytes(b"".join(p.read_bytes() for p in fortunes) * args.repeat)
        empty.write_bytes(b"")
        megabytes = text.stat().st_size / 1e6
        command = ["taskset", "-c", "0", args.memtrain, "tokenize", "--tokenizer", args.tokenizer]
        load, _ = timed(command + [empty])
        total, ids = timed(command + [text])
        reference = json.loads(subprocess.run(
            ["taskset", "-c", "0", "node", REFERENCE, MODULES, args.tokenizer, text, "--time"],
            capture_output=True, check=True).stdout)
        same = subprocess.run(["node", REFERENCE, MODULES, args.tokenizer, text], capture_output=True,
                              check=True).stdout == ids
    ours = megabytes / (total - load)
    theirs = megabytes / reference["seconds"]
    print(f"{megabytes:.2f} MB of fortunes text, tokenizer {args.tokenizer}, one core each")
    print(f"memtrain tokenize: {ours:.2f} MB/s ({total - load:.2f} s encoding, {load:.2f} s loading left out)")
    print(f"reference (@huggingface/tokenizers, node {subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip()}): "
          f"{theirs:.2f} MB/s ({reference['seconds']:.2f} s encoding)")
    print(f"ids identical: {same}; memtrain / reference: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
