"""memtrain's GPT-2 against a PyTorch reference written here: the same weights and batches go to both, and
logits, loss, every parameter gradient and the losses of 10 AdamW steps (clipping, warmup, cosine) must agree.
With PRECISION bf16 or fp16, memtrain runs 16-bit weights and activations against the same fp32 reference, at
tolerances that fit 16-bit rounding; PyTorch's own bf16 autocast loss is printed beside it for comparison.

usage: test_gpt2_parity.py PARITY_DUMP CONFIG_NAME [PRECISION [masked]]
`masked` leaves about 40% of the targets out of the loss (torch's ignore_index), against memtrain's loss mask.
"""
import math
import sys

import torch
import torch.nn.functional as F

from parity_common import random_params, run_parity

CONFIGS = {
    # Powers of two, and a shape where nothing is: C=120 with 5 heads (hs=24), T=37, V=1003 (padded to 1024).
    "tiny": dict(n_layer=2, n_head=4, n_embd=64, n_positions=64, vocab_size=256, B=2, T=32),
    "odd": dict(n_layer=2, n_head=5, n_embd=120, n_positions=40, vocab_size=1003, B=2, T=37),
}


def gpt2_param_shapes(c):
    C, L = c["n_embd"], c["n_layer"]
    shapes = {"wte.weight": [c["vocab_size"], C], "wpe.weight": [c["n_positions"], C]}
    for l in range(L):
        h = f"h.{l}."
        shapes.update({
            h + "ln_1.weight": [C], h + "ln_1.bias": [C],
            h + "attn.c_attn.weight": [C, 3 * C], h + "attn.c_attn.bias": [3 * C],
            h + "attn.c_proj.weight": [C, C], h + "attn.c_proj.bias": [C],
            h + "ln_2.weight": [C], h + "ln_2.bias": [C],
            h + "mlp.c_fc.weight": [C, 4 * C], h + "mlp.c_fc.bias": [4 * C],
            h + "mlp.c_proj.weight": [4 * C, C], h + "mlp.c_proj.bias": [C],
        })
    shapes.update({"ln_f.weight": [C], "ln_f.bias": [C]})
    return shapes


def forward(p, c, tokens):
    """GPT-2 with Conv1D weights [in, out]: returns logits [B, T, V]."""
    B, T = tokens.shape
    C, H = c["n_embd"], c["n_head"]
    x = p["wte.weight"][tokens] + p["wpe.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(c["n_layer"]):
        h = f"h.{l}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5)
        q, k, v = (a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5)
        m = F.gelu(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    return x @ p["wte.weight"].t()


def main():
    dump, name = sys.argv[1], sys.argv[2]
    precision = sys.argv[3] if len(sys.argv) > 3 else "fp32"
    c = CONFIGS[name]
    params = random_params(gpt2_param_shapes(c), lambda n: n.startswith("ln") or ".ln_" in n)
    config = {k: c[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")}
    run_parity(dump, name, precision, c, config, params, forward, masked=sys.argv[4:] == ["masked"])


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
