"""AdamW with int8 and fp8 moments on real gradients, bit for bit against the numpy reference of
tests/quant/test_moment_quant.py: the gradients are what memtrain's GPT-2 backward computes (checked against
PyTorch by parity.gpt2.*) on four batches of random tokens, flattened in Hugging Face name order. The first
one seeds the moments, the other three drive three steps.

usage: test_moment_step_real.py PARITY_DUMP QUANT_DUMP
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "quant"))
import test_moment_quant as quant  # noqa: E402
from parity_common import random_params, read_safetensors, write_safetensors  # noqa: E402
from test_gpt2_parity import CONFIGS, gpt2_param_shapes  # noqa: E402

BATCHES = 4


def real_gradients(parity_dump, tmp):
    """One flat fp32 gradient per batch: parity_dump's gradients of its first batch, run once per batch."""
    c = CONFIGS["tiny"]
    params = random_params(gpt2_param_shapes(c), lambda n: n.startswith("ln") or ".ln_" in n)
    config = os.path.join(tmp, "config.json")
    with open(config, "w") as f:
        f.write('{"n_layer": %d, "n_head": %d, "n_embd": %d, "n_positions": %d, "vocab_size": %d}' %
                tuple(c[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")))
    weights = os.path.join(tmp, "weights.safetensors")
    write_safetensors(weights, params)
    gen = torch.Generator().manual_seed(99)
    grads = []
    for b in range(BATCHES):
        batches, out = os.path.join(tmp, f"batch{b}.bin"), os.path.join(tmp, f"grads{b}.safetensors")
        tokens, targets = (torch.randint(0, c["vocab_size"], (c["B"], c["T"]), generator=gen) for _ in range(2))
        with open(batches, "wb") as f:
            f.write(tokens.int().numpy().tobytes() + targets.int().numpy().tobytes())
        subprocess.run([parity_dump, config, weights, batches, str(c["B"]), str(c["T"]), "1", out], check=True,
                       stdout=subprocess.DEVNULL)
        got = read_safetensors(out)
        names = sorted(k for k in got if k.startswith("grad."))
        grads.append(np.concatenate([got[k].numpy().ravel() for k in names]).astype(quant.F32))
    return grads


def main():
    parity_dump, quant.DUMP = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        grads = real_gradients(parity_dump, tmp)
        print(f"{len(grads[0])} parameters, gradient norms " + ", ".join(f"{np.linalg.norm(g):.3g}" for g in grads))
        if min(np.linalg.norm(g) for g in grads) == 0:
            print("a gradient is all zeros: nothing would be tested")
            return 1
        for fmt in ("int8", "fp8"):
            quant.check_adamw_steps(tmp, rng, fmt, "GPT-2 gradients", grads)
    return quant.verdict()


if __name__ == "__main__":
    torch.set_num_threads(2)
    with np.errstate(invalid="ignore"):
        sys.exit(main())
