"""Low precision against fp32 over a real run: gpt2-demo on the fortunes text (the demo's data), 300 steps, in
fp32, bf16, fp16 (dynamic loss scaling), bf16 + O2 (bf16 moments and gradients) and bf16 + O2 without master
weights. Prints the per-step loss and gradient-norm differences against fp32 (the check users make by hand
before trusting a low-precision run) and requires every final validation loss within 2% of fp32's.

usage: test_precision_convergence.py WORK_DIR   (runs the binary memtrain_cli.py names)
"""
import sys
from pathlib import Path

from memtrain_cli import memtrain, read_metrics, train

STEPS = 300
MODES = {
    "fp32": [],
    "bf16": ["--bf16"],
    "fp16": ["--fp16"],
    "bf16+O2": ["--bf16", "--o2-optimizer", "--o2-gradient"],
    "bf16+O2, no master": ["--bf16", "--o2-optimizer", "--o2-gradient", "--no-master-weights"],
}
TOLERANCE = 0.02


def check(result):
    if result.returncode != 0:
        sys.exit(f"{' '.join(result.args)}: exit {result.returncode}\n{result.stderr}")


def prepare(data: Path):
    if (data / "fortunes_train_000000.bin").exists():
        return
    texts = sorted(p for p in Path("/usr/share/games/fortunes").iterdir()
                   if p.is_file() and p.suffix not in (".dat", ".u8"))
    check(memtrain("prepare", *texts, "--out", data, "--name", "fortunes"))


def train_demo(data: Path, out: Path, flags, eval_interval=STEPS) -> list:
    """The demo's model and schedule on 64-token windows, evaluated every eval_interval steps (by default once,
    at the end)."""
    check(train(*flags, model="gpt2-demo", data=data, seq_length=64, micro_batch_size=8, train_iters=STEPS, lr=2e-3,
                min_lr=2e-4, lr_warmup_iters=20, eval_interval=eval_interval, eval_iters=8, threads=2, out=out,
                timeout=1500))
    return read_metrics(out)


def main():
    work = Path(sys.argv[1])
    data = work / "data"
    prepare(data)
    runs = {name: train_demo(data, work / name.replace(" ", "_").replace(",", ""), flags)
            for name, flags in MODES.items()}
    reference = runs["fp32"]
    print(f"{'step':>5} " + " ".join(f"{name + ' dloss':>22} {'dnorm':>8}" for name in MODES if name != "fp32"))
    for i, r in enumerate(reference):
        if r["step"] in (1, 2, 5, 10, 20, 50) or r["step"] % 50 == 0:
            cells = []
            for name, records in runs.items():
                if name == "fp32":
                    continue
                dnorm = (records[i]["grad_norm"] or float("nan")) - r["grad_norm"]
                cells.append(f"{records[i]['loss'] - r['loss']:>+22.4f} {dnorm:>+8.4f}")
            print(f"{r['step']:>5} " + " ".join(cells))
    failures = []
    final = reference[-1]["val_loss"]
    print(f"final validation loss fp32 {final:.4f}")
    for name, records in runs.items():
        val = records[-1]["val_loss"]
        diff = (val - final) / final
        print(f"  {name:20s} {val:.4f} ({diff:+.2%})")
        if abs(diff) > TOLERANCE:
            failures.append(name)
    if failures:
        print("FAILED: not within 2% of fp32:", ", ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
