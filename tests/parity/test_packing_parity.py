"""Packed sequences against each record run alone: memtrain runs rows that hold several records, each token
attending only to its own record's earlier tokens with positions restarting per record (document-masked
attention, as `prepare --pack` lays records out); the PyTorch reference runs every record as a sequence of its
own through the model's plain reference forward (test_gpt2_parity.py, test_llama_parity.py). The packed
logits, the masked loss (ignore_index on the targets left out), every gradient and 10 AdamW steps must agree.

usage: test_packing_parity.py PARITY_DUMP gpt2|llama CONFIG_NAME [PRECISION]
"""
import sys

import torch
import torch.nn.functional as F

import test_gpt2_parity
import test_llama_parity
from parity_common import (IGNORED, STEPS, TOLERANCES, Checks, adamw_losses, random_params, rel, run_dump)


def packed_batches(c):
    """Rows of records of random lengths (at least one row of several, one record filling a row), their
    positions, and targets with about a third left out."""
    gen = torch.Generator().manual_seed(777)
    B, T, V = c["B"], c["T"], c["vocab_size"]
    batches, positions = [], []
    for step in range(STEPS):
        pos = torch.zeros(B, T, dtype=torch.int64)
        for b in range(B):
            t = 0
            while t < T:
                length = T if step == 0 and b == 0 else int(torch.randint(1, T // 2, (1,), generator=gen))
                length = min(length, T - t)
                pos[b, t:t + length] = torch.arange(length)
                t += length
        tokens = torch.randint(0, V, (B, T), generator=gen)
        targets = torch.randint(0, V, (B, T), generator=gen)
        targets = targets.masked_fill(torch.rand(B, T, generator=gen) < 0.3, IGNORED)
        targets[:, 0] = torch.randint(0, V, (B,), generator=gen)
        batches.append((tokens, targets))
        positions.append(pos)
    return batches, positions


def records_alone(forward, params, c, tokens, pos):
    """The logits [B, T, V] of each record run as its own sequence, laid back where it was packed."""
    rows = []
    for b in range(tokens.shape[0]):
        starts = (pos[b] == 0).nonzero().flatten().tolist() + [tokens.shape[1]]
        rows.append(torch.cat([forward(params, c, tokens[b:b + 1, s:e])[0] for s, e in zip(starts, starts[1:])]))
    return torch.stack(rows)


def main():
    dump, family, name = sys.argv[1], sys.argv[2], sys.argv[3]
    precision = sys.argv[4] if len(sys.argv) > 4 else "fp32"
    module = {"gpt2": test_gpt2_parity, "llama": test_llama_parity}[family]
    c = dict(module.CONFIGS[name])
    if family == "gpt2":
        params = random_params(module.gpt2_param_shapes(c), lambda n: n.startswith("ln") or ".ln_" in n)
        config = {k: c[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")}
    else:
        params = random_params(module.llama_param_shapes(c), lambda n: n.endswith("norm.weight"))
        config = {k: v for k, v in c.items() if k not in ("B", "T")}
        config["model_type"] = "llama"
    tol = TOLERANCES[precision]
    batches, positions = packed_batches(c)
    got = run_dump(dump, c, config, params, batches, precision, positions=positions)
    check = Checks()

    def loss_of(tokens, targets, pos):
        logits = records_alone(module.forward, params, c, tokens, pos)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    (tokens, targets), pos = batches[0], positions[0]
    logits, loss = loss_of(tokens, targets, pos)
    loss.backward()
    print(f"PyTorch (records alone) loss {loss.item():.6f}, memtrain packed {precision} {got['loss'].item():.6f}")
    check("logits", rel(got["logits"], logits.detach().view(c["B"] * c["T"], -1)), tol["logits"])
    check("loss", abs(got["loss"].item() - loss.item()) / loss.item(), tol["loss"])
    for pname, p in params.items():
        check("grad " + pname, rel(got["grad." + pname], p.grad), tol["grad"])
        p.grad = None
    step_positions = iter(positions)
    losses = adamw_losses(params, lambda tokens, targets: loss_of(tokens, targets, next(step_positions))[1],
                          batches)
    for i, (a, b) in enumerate(zip(got["losses"].tolist(), losses), start=1):
        check(f"loss at step {i}", abs(a - b) / abs(b), tol["steps"])
    check.finish(f"packing parity {family} {name} {precision}")


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
