"""memtrain's --optimizer adam-mini against a PyTorch reference of Adam-mini written here from the paper (Zhang et
al. 2024, "Adam-mini: Use Fewer Learning Rates To Gain More", Algorithm 1 and the partition of section 2.3):
fp32, 6 steps on the same weights and batches, with parity_dump's clipping, warmup, cosine and decay on matrices.
The losses and every trained weight must agree within 1e-5 relative, and memtrain's second moments must take
4 bytes per block of the reference's partition. The same weights trained by per-element AdamW must end far from
both (so the check can tell the two optimizers apart).

With MOMENTS int8 or fp8, memtrain keeps m in 8 bits, block-quantized as AdamW's m over the flat parameters
(a quantization block straddles tensors), and the reference does the same after each step with the numpy
quantizer of tests/quant/test_moment_quant.py (written from the formats' definitions, bit for bit with
memtrain's). The losses keep fp32's tolerance; the weights get TOL_8BIT: where memtrain's m and the
reference's differ by an ulp (their gradients differ by more) and straddle the midpoint of two codes, they
store neighbouring codes, and that element's steps differ by a code's width from then on (a few elements of
a tensor: 2e-5 at most seen). The unquantized reference must end outside TOL_8BIT (8e-4 off, seen).

usage: test_adam_mini_parity.py PARITY_DUMP gpt2|llama CONFIG_NAME [fp32|int8|fp8]
"""
import math
import os
import sys

import numpy as np
import torch

import test_gpt2_parity
import test_llama_parity
from parity_common import Checks, loss_of, lr_at, random_batches, random_params, rel, run_dump

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "quant"))
import test_moment_quant as quant  # noqa: E402

STEPS = 6
BETAS, EPS, DECAY, TOL = (0.9, 0.95), 1e-8, 0.1, 1e-5
TOL_8BIT = 1e-4  # the weights' with 8-bit m
CODES_DIFFERING = 2e-3  # the share of m's stored bytes that may differ from the reference's (code flips)
SCALES_OFF = 1e-2  # the share of m's scales that may differ (a flipped code held the absmax)


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

    def __init__(self, params, model, c, stored=None):
        self.params, self.t, self.stored = params, 0, stored
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
        if self.stored:
            self.stored(self.m)


class FlatQuantizedM:
    """m as memtrain stores it in 8 bits: every tensor at its offset in the flat parameters (the rest, the
    vocabulary's padding, stays 0: its gradients are), quantized per block of the flat range with the first
    moment's codec, and read back."""

    def __init__(self, fmt, got):
        self.codec = "dynamic_signed" if fmt == "int8" else "e4m3"
        self.n = int(got["num_params"].item())
        self.offset = {k[len("flat_offset."):]: int(v.item()) for k, v in got.items() if k.startswith("flat_offset.")}

    def apart(self, codes, scales):
        """How far m stored as `codes` and `scales` lies from the reference's last m, in codes: the largest
        difference of an element's values, over its block's absmax times the map's widest step between two
        codes (a code flip is at most 1)."""
        mine = quant.dequantize_blocks(self.codec, codes, scales)
        ref = quant.dequantize_blocks(self.codec, self.codes, self.scales)
        values = quant.CODECS[self.codec]["values"].astype(np.float64)
        values = np.unique(values[~np.isnan(values)])
        widest = np.max(np.diff(values)) / values[-1]  # over the value that the absmax takes
        block = quant.CODECS[self.codec]["block"]
        absmax = np.repeat(np.maximum(scales, self.scales).astype(np.float64) * values[-1], block)[:len(codes)]
        return float(np.max(np.abs(mine - ref) / np.maximum(absmax, 1e-30), initial=0) / widest)

    def __call__(self, m):
        flat = np.zeros(self.n, dtype=np.float32)
        for n, t in m.items():
            flat[self.offset[n]:self.offset[n] + t.numel()] = t.flatten().numpy()
        codes, scales = quant.quantize_blocks(self.codec, flat)
        self.codes, self.scales = codes, scales
        back = quant.dequantize_blocks(self.codec, codes, scales)
        for n, t in m.items():
            t.copy_(torch.from_numpy(back[self.offset[n]:self.offset[n] + t.numel()]).view_as(t))


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


def check_stored_m(check, got, stored):
    """m as memtrain stored it after the last step (its bytes and scales) against the reference's."""
    codes = got["adam_m"].numpy().astype(np.uint8)
    differ = np.count_nonzero(codes != stored.codes)
    print(f"m's bytes: {differ} of {len(codes)} differ from the reference's")
    check("m's bytes that differ (share)", differ / len(codes), CODES_DIFFERING)
    # A flipped element may flip again on a later step: a few codes, never a wrong value.
    check("m's values apart, in the widest codes", stored.apart(codes, got["adam_m_scales"].numpy()), 4)
    # A block's scale is its absmax: off where that element's code flipped on an earlier step.
    scales = got["adam_m_scales"].numpy().astype(np.float64)
    rel_off = np.abs(scales - stored.scales) / np.maximum(np.abs(stored.scales), 1e-30)
    off = np.count_nonzero(rel_off > TOL_8BIT)
    print(f"m's scales: {off} of {len(scales)} off by more than {TOL_8BIT:.0e} (the largest {np.max(rel_off):.1e})")
    check("m's scales off (share)", off / len(scales), SCALES_OFF)


def main():
    dump, model, name = sys.argv[1:4]
    moments = sys.argv[4] if len(sys.argv) > 4 else "fp32"
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
    got = run_dump(dump, c, config, params, batches, "fp32", "adam-mini", moments, steps=STEPS)
    initial = {n: p.detach().clone() for n, p in params.items()}
    adamw = adamw_weights(params, module.forward, c, batches)
    unquantized = None
    if moments != "fp32":
        unquantized = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
        train(unquantized, module.forward, c, batches, AdamMini(unquantized, model, c).step)
    stored = FlatQuantizedM(moments, got) if unquantized else None
    opt = AdamMini(params, model, c, stored)
    losses = train(params, module.forward, c, batches, opt.step)

    check = Checks()
    for i, (a, b) in enumerate(zip(got["losses"].tolist(), losses), start=1):
        check(f"loss at step {i}", abs(a - b) / abs(b), TOL)
    for n, p in params.items():
        check("weight " + n, rel(got["final." + n], p.detach()), TOL_8BIT if unquantized else TOL)
    blocks = opt.blocks()
    print(f"second moments: {blocks} blocks, memtrain's v {int(got['v_bytes'].item())} bytes")
    check("v bytes = 4 x blocks", abs(got["v_bytes"].item() - 4 * blocks) / (4 * blocks), 0.0)
    # The test tells the optimizers apart: AdamW moves the weights off Adam-mini's by far more than TOL.
    moved = max(rel(adamw[n].detach(), p.detach()) for n, p in params.items() if p.dim() == 2)
    step = max(rel(p.detach(), initial[n]) for n, p in params.items() if p.dim() == 2)
    print(f"AdamW's weights off Adam-mini's by up to {moved:.2e} (Adam-mini's steps moved them {step:.2e})")
    check("AdamW not within tolerance of Adam-mini (inverse)", TOL / moved, 1e-2)
    if unquantized:
        check_stored_m(check, got, stored)
        # ... and the quantizing: fp32 m moves the weights off the 8-bit reference's by more than TOL_8BIT.
        apart = max(rel(unquantized[n].detach(), p.detach()) for n, p in params.items() if p.dim() == 2)
        print(f"fp32 m's weights off {moments} m's by up to {apart:.2e}")
        check(f"fp32 m not within tolerance of {moments} m (inverse)", TOL_8BIT / apart, 0.5)
    check.finish(f"adam-mini parity {model} {name} {moments} m")


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
