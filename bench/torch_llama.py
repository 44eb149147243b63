#!/usr/bin/python3
"""A LLaMA-family model (from a Hugging Face config.json) trained in plain PyTorch on CPU: the baseline
bench_llama.sh compares memtrain with. RMSNorm, rotary embeddings (rotate_half), grouped-query attention
(key/value heads repeated for their query heads), SwiGLU MLP, no biases, tied or untied head; initialised as
Hugging Face does (every matrix N(0, 0.02), norm weights 1).

fp32 by default; --autocast bf16 runs the forward and the loss under torch.autocast(device_type="cpu",
dtype=torch.bfloat16), parameters, gradients and AdamW staying fp32. The loop, flags and JSON summary are
torch_gpt2.py's (run_benchmark). --lora-rank R applies LoRA as PEFT does to every linear module of the layers
(y = x W^T + (alpha / R) x A^T B^T, A Kaiming-uniform, B zero) and freezes everything else: the reference of
bench_llama.sh's LoRA configurations. Run with Debian's /usr/bin/python3 (torch 1.13).
"""
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from torch_gpt2 import run_benchmark


class RMSNorm(nn.Module):
    def __init__(self, channels, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    """rotate_half: x * cos + [-x2, x1] * sin, over x's last dimension."""
    half = x.size(-1) // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, I = c["hidden_size"], c["intermediate_size"]
        self.heads, self.kv_heads = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
        self.hs = C // self.heads
        eps = c.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(C, eps)
        self.q_proj = nn.Linear(C, C, bias=False)
        self.k_proj = nn.Linear(C, self.kv_heads * self.hs, bias=False)
        self.v_proj = nn.Linear(C, self.kv_heads * self.hs, bias=False)
        self.o_proj = nn.Linear(C, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.gate_proj = nn.Linear(C, I, bias=False)
        self.up_proj = nn.Linear(C, I, bias=False)
        self.down_proj = nn.Linear(I, C, bias=False)

    def attention(self, x, mask, cos, sin):
        b, t, c = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.hs).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.hs).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.hs).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        # torch 1.13 has no scaled_dot_product_attention, so mask and softmax explicitly.
        y = F.softmax(scores.masked_fill(mask[:t, :t], float("-inf")), dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x, mask, cos, sin):
        x = x + self.attention(self.input_layernorm(x), mask, cos, sin)
        m = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))


class Llama(nn.Module):
    def __init__(self, c, vocab, checkpoint=False):
        super().__init__()
        self.checkpoint = checkpoint
        self.embed_tokens = nn.Embedding(vocab, c["hidden_size"])
        self.layers = nn.ModuleList(Block(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))
        self.lm_head = None if c.get("tie_word_embeddings", False) else nn.Linear(c["hidden_size"], vocab, bias=False)
        positions, hs = c["max_position_embeddings"], c["hidden_size"] // c["num_attention_heads"]
        inv_freq = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, hs, 2).float() / hs))
        angles = torch.arange(positions).float()[:, None] * inv_freq[None, :]
        self.register_buffer("cos", torch.cat([angles, angles], -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat([angles, angles], -1).sin(), persistent=False)
        # True above the diagonal: the future positions a token may not attend to.
        self.register_buffer("mask", torch.ones(positions, positions, dtype=torch.bool).triu(1), persistent=False)
        for name, p in self.named_parameters():
            if not name.endswith("norm.weight"):
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:t], self.sin[:t]
        for layer in self.layers:
            if self.checkpoint:
                x = torch.utils.checkpoint.checkpoint(layer, x, self.mask, cos, sin, use_reentrant=False)
            else:
                x = layer(x, self.mask, cos, sin)
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = self.norm(x) @ head.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class LoraLinear(nn.Module):
    """A frozen nn.Linear with PEFT's adapter beside it."""

    def __init__(self, base, rank, alpha):
        super().__init__()
        self.base, self.scale = base, alpha / rank
        base.weight.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scale


LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def make_model(args):
    with open(args.config) as f:
        config = json.load(f)
    model = Llama(config, args.vocab, checkpoint=args.checkpoint)
    if args.lora_rank:
        model.requires_grad_(False)
        for block in model.layers:
            for name in LINEAR:
                setattr(block, name, LoraLinear(getattr(block, name), args.lora_rank, args.lora_alpha))
    return model


def add_model_args(ap):
    ap.add_argument("--config", required=True, help="Hugging Face LLaMA config.json")
    ap.add_argument("--lora-rank", type=int, default=0, help="LoRA on every linear of the layers (0: none)")
    ap.add_argument("--lora-alpha", type=float, default=8.0)


if __name__ == "__main__":
    run_benchmark(__doc__, make_model, add_model_args)
