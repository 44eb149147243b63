"""What the parity tests share: our own safetensors reading and writing (no safetensors package needed), the
run of parity_dump on the same weights and batches as a PyTorch reference, and the checks of logits, loss,
every parameter gradient and the losses of 10 AdamW steps (clipping, warmup, cosine) against it.

A model's test gives its reference `forward(params, c, tokens) -> logits [B, T, V]`, its parameters under
Hugging Face names (the names parity_dump writes gradients under), and the config.json that memtrain reads.
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

STEPS = 10
# Relative tolerances per precision: logits, loss, gradients (relative L2), losses over the AdamW steps.
TOLERANCES = {
    "fp32": dict(logits=1e-5, loss=1e-5, grad=1e-4, steps=1e-5),
    "bf16": dict(logits=2e-2, loss=1e-2, grad=3e-2, steps=1e-2),
    "fp16": dict(logits=3e-3, loss=1e-3, grad=4e-3, steps=1e-3),
}


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


def random_params(shapes, is_norm, seed=1234):
    """Parameters for {name: shape}: norm weights near 1 (norm biases near 0; is_norm(name) says which are
    norms), other biases N(0, 0.02), matrices N(0, 0.05); fp32 leaves that collect gradients."""
    gen = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in shapes.items():
        if is_norm(name):
            base = 1.0 if name.endswith("weight") else 0.0
            t = base + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("bias"):
            t = 0.02 * torch.randn(shape, generator=gen)
        else:
            t = 0.05 * torch.randn(shape, generator=gen)
        params[name] = t.float().requires_grad_(True)
    return params


IGNORED = -100  # torch's ignore_index, which parity_dump turns into a loss mask


def random_batches(c, masked=False):
    """Random tokens and targets; `masked` leaves out about 40% of the targets (a different share per batch,
    never all of them), as instruction data does, and cross_entropy's mean then counts only the others."""
    gen = torch.Generator().manual_seed(4321)
    batches = []
    for _ in range(STEPS):
        tokens = torch.randint(0, c["vocab_size"], (c["B"], c["T"]), generator=gen)
        targets = torch.randint(0, c["vocab_size"], (c["B"], c["T"]), generator=gen)
        if masked:
            ignored = torch.rand(c["B"], c["T"], generator=gen) < 0.2 + 0.4 * torch.rand(1, generator=gen)
            ignored.view(-1)[0] = False
            targets = targets.masked_fill(ignored, IGNORED)
        batches.append((tokens, targets))
    return batches


def run_dump(dump, c, config_json, params, batches, *args, positions=None, steps=STEPS):
    """parity_dump on the weights `params` and `batches`, with its trailing arguments `args`: what it wrote, with
    the tensors of a PEFT adapter it wrote beside it under "adapter/" + their keys. `positions` (one [B, T]
    tensor per batch: each token's position in its record) runs packed sequences."""
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.json")
        with open(config, "w") as f:
            json.dump(config_json, f)
        weights = os.path.join(tmp, "weights.safetensors")
        write_safetensors(weights, params)
        with open(os.path.join(tmp, "batches.bin"), "wb") as f:
            for tokens, targets in batches:
                                f.write(tokens.int().numpy().tobytes() + targets.int().numpy().tobytes())
        if positions is not None:
            with open(os.path.join(tmp, "batches.bin.positions"), "wb") as f:
                for p in positions:
                    f.write(p.int().numpy().tobytes())
        out = os.path.join(tmp, "out.safetensors")
        subprocess.run([dump, config, weights, os.path.join(tmp, "batches.bin"), str(c["B"]), str(c["T"]),
                        str(steps), out, *map(str, args)], check=True)
        got = read_safetensors(out)
        adapter = os.path.join(out + ".adapter", "adapter_model.safetensors")
        if os.path.exists(adapter):
            got.update({"adapter/" + k: v for k, v in read_safetensors(adapter).items()})
        return got


class Checks:
    """Relative errors against tolerances, printed as they are checked; finish() exits non-zero on a failure."""

    def __init__(self):
        self.failures, self.count = [], 0

    def __call__(self, what, err, tol):
        print(f"{what:50s} rel err {err:.2e} (tolerance {tol:.0e})")
        self.count += 1
        if not err <= tol:
            self.failures.append(what)

    def finish(self, title):
        if self.failures:
            print("FAILED:", ", ".join(self.failures))
            sys.exit(1)
        print(f"{title}: all {self.count} checks passed")


def loss_of(forward, params, c, tokens, targets):
    logits = forward(params, c, tokens)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def adamw_losses(trained, loss_fn, batches):
    """The losses of AdamW steps on the tensors `trained` ({name: leaf}) as parity_dump takes them: decay 0.1
    on matrices only, betas (0.9, 0.95), clipping at 1, lr_at's schedule. loss_fn(tokens, targets) -> loss."""
    decay = [p for p in trained.values() if p.dim() == 2]
    no_decay = [p for p in trained.values() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for step, (tokens, targets) in enumerate(batches, start=1):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        opt.zero_grad()
        loss = loss_fn(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(trained.values()), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def run_parity(dump, name, precision, c, config_json, params, forward, masked=False):
    """Runs parity_dump and the reference on the same inputs; exits non-zero on any check out of tolerance.
    `masked`: targets left out of the loss (cross_entropy's ignore_index), against memtrain's loss mask."""
    tol = TOLERANCES[precision]
    B, T = c["B"], c["T"]
    batches = random_batches(c, masked)
    got = run_dump(dump, c, config_json, params, batches, precision)
    check = Checks()

    tokens, targets = batches[0]
    autocast_grads = {}
    if precision != "fp32":
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            auto = forward(params, c, tokens).float()
        auto_loss = F.cross_entropy(auto.view(-1, auto.size(-1)), targets.view(-1))
        auto_loss.backward()
        autocast_grads = {pname: p.grad.clone() for pname, p in params.items()}
        for p in params.values():
            p.grad = None
        print(f"PyTorch bf16 autocast loss {auto_loss.item():.6f}")
    logits = forward(params, c, tokens)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
    loss.backward()
    print(f"PyTorch fp32 loss {loss.item():.6f}, memtrain {precision} loss {got['loss'].item():.6f}")
    check("logits", rel(got["logits"], logits.detach().view(B * T, -1)), tol["logits"])
    check("loss", abs(got["loss"].item() - loss.item()) / loss.item(), tol["loss"])
    for pname, p in params.items():
        check("grad " + pname, rel(got["grad." + pname], p.grad), tol["grad"])
        if pname in autocast_grads:  # for scale: PyTorch's bf16 autocast, which keeps fp32 residuals
            print(f"{'':50s} PyTorch bf16 autocast: {rel(autocast_grads[pname], p.grad):.2e}")

    for p in params.values():
        p.grad = None
    losses = adamw_losses(params, lambda tokens, targets: loss_of(forward, params, c, tokens, targets), batches)
    for i, (a, b) in enumerate(zip(got["losses"].tolist(), losses), start=1):
        check(f"loss at step {i}", abs(a - b) / abs(b), tol["steps"])
    check.finish(f"parity {name} {precision}{' masked' if masked else ''}")
