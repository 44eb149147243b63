"""memtrain's --optimizer adam-mini against a PyTorch reference of Adam-mini written here from the paper (Zhang et
al. 2024, "Adam-mini: Use Fewer Learning Rates To Gain More", Algorithm 1 and the partition of section 2.3):
fp32, 6 steps on the same weights and batches, with parity_dump's clipping, warmup, cosine and decay on matrices.
The losses and every trained weight must agree within 1e-5 relative, and memtrain's second moments must take
4 bytes per block of the reference's partition. The same weights trained by per-element AdamW must end far from
both (so the check can tell the two optimizers apart).

usage: test_adam_mini_parity.py PARITY_DUMP gpt2|llama CONFIG_NAME
"""
import math
import sys

import torch

import test_gpt2_parity
import test_llama_parity
from parity_common import Checks, loss_of, lr_at, random_batches, random_params, rel, run_dump

STEPS = 6
BETAS, EPS, DECAY, TOL = (0.9, 0.95), 1e-8, 0.1, 1e-5


def block_ids(name, shape, model, c):
    """The paper's partition as a block number per element (numbered within the tensor): q and k per head, v,
    the attention output and the MLP per output neuron, the embeddings and the head per token, a vector whole.
    GPT-2's weights are Conv1D [in, out] (a neuron is a column), LLaMA's nn.Linear [out, in] (a row)."""
    if len(shape) == 1:
        return torch.zeros(shape, dtype=torch.int64)
    rows, cols = shape
    row = torch.arange(rows)[:, None].expand(rows, cols)
    col = torch.arange(cols)[None, :].expand(rows, cols)
    if model == "gpt2":
        if name.endswith("wte.weight") or name.endswith("wpe.weight"):
            return row.clone()
        if name.endswith("attn.c_attn.weight"):  # q | k | v columns, fused
            C, H = c["n_embd"], c["n_head"]
            hs = C // H
            return torch.where(col < 2 * C, col // hs, 2 * H + (col - 2 * C))
        return col.clone()
    hs = c["hidden_size"] // c["num_attention_heads"]
    if name.endswith("q_proj.weight") or name.endswith("k_proj.weight"):
        return row // hs
    return row.clone()


class AdamMini:
    """Algorithm 1 with AdamW's decoupled weight decay: m per element, one v per block,
    v_b = beta2 v_b + (1 - beta2) mean(g^2 over b), p <- p (1 - lr wd) - lr/bc1 * m / (sqrt(v_b)/sqrt(bc2) + eps)."""

    def __init__(self, params, model, c):
        self.params, self.t = params, 0
        self.ids = {n: block_ids(n, list(p.shape), model, c) for n, p in params.items()}
        self.count = {n: torch.bincount(i.flatten()).double() for n, i in self.ids.items()}
        self.m = {n: torch.zeros_like(p) for n, p in params.items()}
        self.v = {n: torch.zeros(len(k)) for n, k in self.count.items()}

    def blocks(self):
        return sum(len(v) for v in self.v.values())

    @torch.no_grad()
    def step(self, lr):
        self.t += 1
        bc1, bc2 = 1 - BETAS[0] ** self.t, 1 - BETAS[1] ** self.t
        for n, p in self.params.items():
            g, ids = p.grad, self.ids[n].flatten()
            sums = torch.zeros(len(self.v[n]), dtype=torch.float64).index_add_(0, ids, g.flatten().double() ** 2)
            self.v[n].mul_(BETAS[1]).add_((sums / self.count[n]).float(), alpha=1 - BETAS[1])
            p.mul_(1 - lr * (DECAY if p.dim() == 2 else 0.0))
            self.m[n].lerp_(g, 1 - BETAS[0])
            denom = (self.v[n].sqrt() / math.sqrt(bc2) + EPS)[ids].view_as(p)
            p.addcdiv_(self.m[n], denom, value=-lr / bc1)


def train(params, forward, c, batches, opt_step):
    losses = []
    for step, (tokens, targets) in enumerate(batches[:STEPS], start=1):
        for p in params.values():
            p.grad = None
        loss = loss_of(forward, params, c, tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt_step(lr_at(step, total=STEPS))
        losses.append(loss.item())
    return losses


def adamw_weights(params, forward, c, batches):
    copy = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    decay = [p for p in copy.values() if p.dim() == 2]
    rest = [p for p in copy.values() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": DECAY}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=BETAS, eps=EPS)

    def step(lr):
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()

    train(copy, forward, c, batches, step)
    return copy


def main():
    dump, model, name = sys.argv[1:4]
    if model == "gpt2":
        module, c = test_gpt2_parity, test_gpt2_parity.CONFIGS[name]
        params = random_params(module.gpt2_param_shapes(c), lambda n: n.startswith("ln") or ".ln_" in n)
        config = {k: c[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")}
    else:
        module, c = test_llama_parity, test_llama_parity.CONFIGS[name]
        params = random_params(module.llama_param_shapes(c), lambda n: n.endswith("norm.weight"))
        config = {k: v for k, v in c.items() if k not in ("B", "T")}
        config["model_type"] = "llama"
    batches = random_batches(c)
    got = run_dump(dump, c, config, params, batches, "fp32", "adam-mini", steps=STEPS)
    initial = {n: p.detach().clone() for n, p in params.items()}
    adamw = adamw_weights(params, module.forward, c, batches)
    opt = AdamMini(params, model, c)
    losses = train(params, module.forward, c, batches, opt.step)

    check = Checks()
    for i, (a, b) in enumerate(zip(got["losses"].tolist(), losses), start=1):
        check(f"loss at step {i}", abs(a - b) / abs(b), TOL)
    for n, p in params.items():
        check("weight " + n, rel(got["final." + n], p.detach()), TOL)
    blocks = opt.blocks()
    print(f"second moments: {blocks} blocks, memtrain's v {int(got['v_bytes'].item())} bytes")
    check("v bytes = 4 x blocks", abs(got["v_bytes"].item() - 4 * blocks) / (4 * blocks), 0.0)
    # The test tells the optimizers apart: AdamW moves the weights off Adam-mini's by far more than TOL.
    moved = max(rel(adamw[n].detach(), p.detach()) for n, p in params.items() if p.dim() == 2)
    step = max(rel(p.detach(), initial[n]) for n, p in params.items() if p.dim() == 2)
    print(f"AdamW's weights off Adam-mini's by up to {moved:.2e} (Adam-mini's steps moved them {step:.2e})")
    check("AdamW not within tolerance of Adam-mini (inverse)", TOL / moved, 1e-2)
    check.finish(f"adam-mini parity {model} {name}")


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
