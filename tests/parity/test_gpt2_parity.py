"""memtrain's GPT-2 against a PyTorch reference written here: the same weights and batches go to both, and
logits, loss, every parameter gradient and the losses of 10 AdamW steps (clipping, warmup, cosine) must agree.
With PRECISION bf16 or fp16, memtrain runs 16-bit weights and activations against the same fp32 reference, at
tolerances that fit 16-bit rounding; PyTorch's own bf16 autocast loss is printed beside it for comparison.

usage: test_gpt2_parity.py PARITY_DUMP CONFIG_NAME [PRECISION]
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

CONFIGS = {
    # Powers of two, and a shape where nothing is: C=120 with 5 heads (hs=24), T=37, V=1003 (padded to 1024).
    "tiny": dict(n_layer=2, n_head=4, n_embd=64, n_positions=64, vocab_size=256, B=2, T=32),
    "odd": dict(n_layer=2, n_head=5, n_embd=120, n_positions=40, vocab_size=1003, B=2, T=37),
}
STEPS = 10
# Relative tolerances per precision: logits, loss, gradients (relative L2), losses over the AdamW steps.
TOLERANCES = {
    "fp32": dict(logits=1e-5, loss=1e-5, grad=1e-4, steps=1e-5),
    "bf16": dict(logits=2e-2, loss=1e-2, grad=3e-2, steps=1e-2),
    "fp16": dict(logits=3e-3, loss=1e-3, grad=4e-3, steps=1e-3),
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


def random_params(c, gen):
    params = {}
    for name, shape in gpt2_param_shapes(c).items():
        if name.startswith("ln") or ".ln_" in name:
            base = 1.0 if name.endswith("weight") else 0.0
            t = base + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("bias"):
            t = 0.02 * torch.randn(shape, generator=gen)
        else:
            t = 0.05 * torch.randn(shape, generator=gen)
        params[name] = t.float().requires_grad_(True)
    return params


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


def lr_at(step, lr=1e-3, min_lr=1e-4, warmup=3, total=STEPS):
    if step <= warmup:
        return lr * step / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = t.detach().contiguous().float().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:end]), dtype=torch.float32).reshape(e["shape"])
    return out


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def main():
    dump, name = sys.argv[1], sys.argv[2]
    precision = sys.argv[3] if len(sys.argv) > 3 else "fp32"
    tol = TOLERANCES[precision]
    c = CONFIGS[name]
    B, T = c["B"], c["T"]
    gen = torch.Generator().manual_seed(1234)
    params = random_params(c, gen)
    batches = [(torch.randint(0, c["vocab_size"], (B, T), generator=gen),
                torch.randint(0, c["vocab_size"], (B, T), generator=gen)) for _ in range(STEPS)]

    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.json")
        with open(config, "w") as f:
            json.dump({k: c[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size")}, f)
        weights = os.path.join(tmp, "weights.safetensors")
        write_safetensors(weights, params)
        with open(os.path.join(tmp, "batches.bin"), "wb") as f:
            for tokens, targets in batches:
                f.write(tokens.int().numpy().tobytes() + targets.int().numpy().tobytes())
        out = os.path.join(tmp, "out.safetensors")
        subprocess.run([dump, config, weights, os.path.join(tmp, "batches.bin"), str(B), str(T), str(STEPS), out, precision],
                       check=True)
        got = read_safetensors(out)

    failures = []

    def check(what, err, tol):
        print(f"{what:40s} rel err {err:.2e} (tolerance {tol:.0e})")
        if not err <= tol:
            failures.append(what)

    tokens, targets = batches[0]
    if precision != "fp32":
        with torch.no_grad(), torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            auto = forward(params, c, tokens).float()
        auto_loss = F.cross_entropy(auto.view(-1, auto.size(-1)), targets.view(-1)).item()
        print(f"PyTorch bf16 autocast loss {auto_loss:.6f}")
    logits = forward(params, c, tokens)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
    loss.backward()
    print(f"PyTorch fp32 loss {loss.item():.6f}, memtrain {precision} loss {got['loss'].item():.6f}")
    check("logits", rel(got["logits"], logits.detach().view(B * T, -1)), tol["logits"])
    check("loss", abs(got["loss"].item() - loss.item()) / loss.item(), tol["loss"])
    for pname, p in params.items():
        check("grad " + pname, rel(got["grad." + pname], p.grad), tol["grad"])

    for p in params.values():
        p.grad = None
    decay = [p for n, p in params.items() if p.dim() == 2]
    no_decay = [p for n, p in params.items() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for step, (tokens, targets) in enumerate(batches, start=1):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        opt.zero_grad()
        logits = forward(params, c, tokens)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        losses.append(loss.item())
    for i, (a, b) in enumerate(zip(got["losses"].tolist(), losses), start=1):
        check(f"loss at step {i}", abs(a - b) / abs(b), tol["steps"])

    if failures:
        print("FAILED:", ", ".join(failures))
        sys.exit(1)
    print(f"parity {name} {precision}: all {len(params) + 2 + STEPS} checks passed")


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
