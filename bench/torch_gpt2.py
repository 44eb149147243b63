#!/usr/bin/python3
"""GPT-2 124M trained in plain PyTorch on CPU or one GPU: the baseline bench_gpt2.sh compares memtrain with.

fp32 by default; with --autocast bf16 the forward pass and the loss run under
torch.autocast(device_type="cpu", dtype=torch.bfloat16) and backward outside it, as PyTorch's
automatic mixed precision documents. Parameters, gradients and AdamW stay fp32 either way (bf16 needs
no loss scaling). With --checkpoint each transformer block runs under
torch.utils.checkpoint.checkpoint(use_reentrant=False): the forward keeps only each block's input, and
the backward reruns the block's forward (under the same autocast state) before its backward.

Run with Debian's /usr/bin/python3 (torch 1.13). Reads one llm.c shard in order, times the steps after
the warmup ones, and prints one JSON object on stdout.

--device cuda (scripts/device_check.sh, on a lent GPU with a recent torch) trains on the GPU as people do there:
autocast to the GPU (device_type="cuda"), F.scaled_dot_product_attention(is_causal=True) for the attention,
AdamW(fused=True), steps timed between torch.cuda.synchronize() calls; its JSON adds the device's memory
(torch.cuda.max_memory_allocated, max_memory_reserved and the driver's used bytes, mem_get_info). Every GPU-only
call sits behind that flag, so the CPU path is the same as before and still runs on torch 1.13.
"""
import contextlib
import argparse
import ctypes
import json
import math
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

SHARD_HEADER_INT32S = 256


class Block(nn.Module):
    def __init__(self, channels, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(channels)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.attn_proj = nn.Linear(channels, channels)
        self.ln2 = nn.LayerNorm(channels)
        self.fc = nn.Linear(channels, 4 * channels)
        self.mlp_proj = nn.Linear(4 * channels, channels)

    def attention(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        # (B, T, C) -> (B, H, T, C/H)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if x.is_cuda and hasattr(F, "scaled_dot_product_attention"):
            # On the GPU the fused kernel (flash or memory-efficient), as a GPU baseline would run it.
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        if mask.device != x.device:
            mask = mask.to(x.device)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
        # torch 1.13 has no scaled_dot_product_attention, so mask and softmax explicitly.
        scores = scores.masked_fill(mask[:t, :t], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x, mask):
        x = x + self.attention(self.ln1(x), mask)
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab, positions, layers, heads, channels, checkpoint=False):
        super().__init__()
        self.checkpoint = checkpoint
        self.wte = nn.Embedding(vocab, channels)
        self.wpe = nn.Embedding(positions, channels)
        self.blocks = nn.ModuleList(Block(channels, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(channels)
        # True above the diagonal: the future positions a token may not attend to. A constant, not a buffer:
        # DistributedDataParallel would broadcast a buffer, and gloo cannot send bool tensors.
        self.mask = torch.ones(positions, positions, dtype=torch.bool).triu(1)
        self.init_weights(layers)

    def init_weights(self, layers):
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" in name:
                nn.init.ones_(p)
            else:
                # GPT-2 scales the projections that feed the residual stream by depth.
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(block, x, self.mask, use_reentrant=False)
            else:
                x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def shard_tokens(path):
    header = np.fromfile(path, dtype=np.int32, count=SHARD_HEADER_INT32S)
    count = int(header[2])
    return np.fromfile(path, dtype=np.uint16, count=count, offset=SHARD_HEADER_INT32S * 4)


def batches(tokens, b, t):
    """Consecutive (B, T) windows with next-token targets, wrapping at the end of the shard."""
    span = b * t
    if len(tokens) < span + 1:
        raise SystemExit(f"shard has {len(tokens)} tokens, a batch needs {span + 1}")
    pos = 0
    while True:
        if pos + span + 1 > len(tokens):
            pos = 0
        chunk = torch.from_numpy(tokens[pos : pos + span + 1].astype(np.int64))
        yield chunk[:-1].view(b, t), chunk[1:].view(b, t)
        pos += span


def model_state_bytes(model, opt):
    """Bytes of parameters (frozen ones too), their gradients and the optimizer's state tensors (AdamW: two
    moments)."""
    # ZeroRedundancyOptimizer keeps this rank's share of the state in its local optimizer, .optim.
    state = getattr(opt, "optim", opt).state
    tensors = [p for p in model.parameters()]
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [v for st in state.values() for v in st.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


def model_state_bytes_per_param(model, opt):
    return model_state_bytes(model, opt) / sum(p.numel() for p in model.parameters())


def rss_bytes():
    """Resident memory of this process now (/proc/self/statm: pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def add_arguments(ap):
    """The flags every PyTorch baseline of bench/ shares: data, batch shape, steps, optimizer, precision."""
    ap.add_argument("--shard", required=True, help="llm.c token shard (*_train_*.bin)")
    ap.add_argument("--batch", type=int, default=4, help="micro-batch size (per rank)")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2, help="steps run before timing starts")
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--vocab", type=int, default=50304, help="50257 padded like memtrain's default")
    ap.add_argument("--autocast", choices=["off", "bf16"], default="off",
                    help="bf16: forward and loss under CPU autocast to bfloat16 (default off: fp32)")
    ap.add_argument("--checkpoint", action="store_true",
                    help="activation checkpointing: torch.utils.checkpoint around each block (non-reentrant)")


def add_device_argument(ap):
    """--device: this script's own flag (the other baselines train on the CPU only)."""
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: one GPU, with autocast to the GPU, fused attention and fused AdamW (default cpu)")


def on_gpu(args):
    """Whether this run trains on the GPU (the baselines without --device never do)."""
    return getattr(args, "device", "cpu") == "cuda"


def seeded_model(make_model, args):
    """make_model(args) on args.threads threads, seeded the same in every process."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    return make_model(args)


def gpt2(args):
    return GPT2(args.vocab, 1024, 12, 12, 768, checkpoint=args.checkpoint)


def adamw_settings(args):
    """Same optimizer settings as memtrain's defaults, so both do the same work per step."""
    return dict(lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def train(model, opt, data, args):
    """warmup + steps training steps on (inputs, targets) from data. Returns the timed steps' milliseconds,
    every step's loss, and the timed steps' RSS growth over the forward pass (on the GPU: the growth of the
    bytes torch's allocator holds for tensors)."""
    gpu = on_gpu(args)
    if args.autocast == "bf16":
        device_type = "cuda" if gpu else "cpu"
        autocast = lambda: torch.autocast(device_type=device_type, dtype=torch.bfloat16)  # noqa: E731
    else:
        autocast = contextlib.nullcontext
    # On the GPU the work is queued: the step's time runs from an idle device to an idle device again.
    sync = torch.cuda.synchronize if gpu else lambda: None
    used_bytes = torch.cuda.memory_allocated if gpu else rss_bytes
    step_ms, losses, forward_rss_growth = [], [], []
    for step in range(args.warmup + args.steps):
        x, y = next(data)
        if gpu:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        sync()
        start = time.perf_counter()
        rss_before = used_bytes()
        with autocast():
            loss = model(x, y)
        # What the forward left alive for the backward, as the kernel sees it: a rough activation size (the
        # allocator may reuse freed memory or hold on to it).
        grown = used_bytes() - rss_before
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        ms = (time.perf_counter() - start) * 1e3
        losses.append(loss.item())
        print(f"torch step {step + 1}: loss {losses[-1]:.4f} {ms:.1f} ms", file=sys.stderr)
        if step >= args.warmup:
            step_ms.append(ms)
            forward_rss_growth.append(grown)
    return step_ms, losses, forward_rss_growth


def cpu_capability():
    """The instruction set ATen's own kernels run at (ATEN_CPU_CAPABILITY caps it), as torch.__config__ says."""
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip()
    return None


def openblas_core():
    """The kernels OpenBLAS chose for this CPU (OPENBLAS_CORETYPE overrides it), or None without OpenBLAS.
    Debian's torch multiplies fp32 through sgemm_ of libblas.so.3, which is OpenBLAS's unless the
    alternatives say otherwise."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")  # the copy torch loaded, if it did
    except OSError:
        return None
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib.openblas_get_corename().decode()


def run_settings(args):
    """The settings a run's JSON summary starts with."""
    return {
        "torch_version": torch.__version__,
        "cpu_capability": cpu_capability(),
        "openblas_core": openblas_core(),
        "autocast": args.autocast,
        "checkpoint": args.checkpoint,
        "threads": args.threads,
        "batch": args.batch,
        "seq": args.seq,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
    }


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def gpu_summary(model):
    """The GPU run's own fields: the card, the parameter count, and its memory as torch's allocator and the
    driver saw it at the end."""
    free, total = torch.cuda.mem_get_info()
    return {
        "device": "cuda",
        "gpu": torch.cuda.get_device_name(),
        "torch_cuda": torch.version.cuda,
        "sdpa": hasattr(F, "scaled_dot_product_attention"),
        "num_params": sum(p.numel() for p in model.parameters()),
        "max_memory_allocated_bytes": torch.cuda.max_memory_allocated(),
        "max_memory_reserved_bytes": torch.cuda.max_memory_reserved(),
        "device_used_bytes": total - free,
        "device_total_bytes": total,
    }


def run_benchmark(description, make_model, add_model_args=lambda ap: None):
    """Parses the shared flags (and the model's, by add_model_args), trains make_model(args) and prints the
    JSON summary: the loop every single-process PyTorch baseline of bench/ runs."""
    ap = argparse.ArgumentParser(description=description)
    add_arguments(ap)
    add_model_args(ap)
    args = ap.parse_args()

    model = seeded_model(make_model, args)
    if on_gpu(args):
        # Initialised on the CPU as there (the same seed, the same weights), then moved; one fused AdamW kernel.
        model = model.cuda()
        opt = torch.optim.AdamW(model.parameters(), fused=True, **adamw_settings(args))
    else:
        opt = torch.optim.AdamW(model.parameters(), **adamw_settings(args))
    data = batches(shard_tokens(args.shard), args.batch, args.seq)
    step_ms, losses, forward_rss_growth = train(model, opt, data, args)

    print(json.dumps({
        **run_settings(args),
        "step_ms": step_ms,
        "step_ms_median": statistics.median(step_ms),
        "tokens_per_sec": statistics.median(args.batch * args.seq / (ms / 1e3) for ms in step_ms),
        "losses": losses,
        "model_state_bytes_per_param": model_state_bytes_per_param(model, opt),
        "model_state_bytes": model_state_bytes(model, opt),
        "forward_rss_growth_bytes": statistics.median(forward_rss_growth),
        "peak_rss_bytes": peak_rss_bytes(),
        **(gpu_summary(model) if on_gpu(args) else {}),
    }))


if __name__ == "__main__":
    run_benchmark(__doc__, gpt2, add_device_argument)
