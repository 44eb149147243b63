"""memtrain's LLaMA against a PyTorch reference written here (Hugging Face's LlamaForCausalLM semantics: RMSNorm,
rotate_half rotary embeddings, grouped-query attention with repeated KV heads, SwiGLU, nn.Linear weights): the
same weights and batches go to both, and logits, loss, every parameter gradient and 10 AdamW steps must agree
(parity_common.py). With PRECISION bf16, memtrain runs 16-bit storage against the same fp32 reference.

usage: test_llama_parity.py PARITY_DUMP CONFIG_NAME [PRECISION [masked]]
`masked` leaves about 40% of the targets out of the loss (torch's ignore_index), against memtrain's loss mask.
"""
import math
import sys

import torch
import torch.nn.functional as F

from parity_common import random_params, run_parity

CONFIGS = {
    # 8 query heads on 2 KV heads, C=128, T=64, untied head.
    "gqa": dict(num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, hidden_size=128,
                intermediate_size=352, max_position_embeddings=64, vocab_size=512, rms_norm_eps=1e-5,
                rope_theta=10000.0, tie_word_embeddings=False, B=2, T=64),
    # Qwen2-like: q/k/v biases, tied head, 4 query heads on 1 KV head (hs=24), nothing a power of two.
    "tied": dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, hidden_size=96,
                 intermediate_size=200, max_position_embeddings=40, vocab_size=1003, rms_norm_eps=1e-6,
                 rope_theta=500000.0, tie_word_embeddings=True, attention_bias=True, B=2, T=37),
}


def llama_param_shapes(c):
    C, I = c["hidden_size"], c["intermediate_size"]
    KV = c["num_key_value_heads"] * C // c["num_attention_heads"]
    shapes = {"model.embed_tokens.weight": [c["vocab_size"], C]}
    for l in range(c["num_hidden_layers"]):
        h = f"model.layers.{l}."
        shapes[h + "input_layernorm.weight"] = [C]
        shapes.update({h + "self_attn.q_proj.weight": [C, C], h + "self_attn.k_proj.weight": [KV, C],
                       h + "self_attn.v_proj.weight": [KV, C]})
        if c.get("attention_bias"):
            shapes.update({h + "self_attn.q_proj.bias": [C], h + "self_attn.k_proj.bias": [KV],
                           h + "self_attn.v_proj.bias": [KV]})
        shapes.update({h + "self_attn.o_proj.weight": [C, C], h + "post_attention_layernorm.weight": [C],
                       h + "mlp.gate_proj.weight": [I, C], h + "mlp.up_proj.weight": [I, C],
                       h + "mlp.down_proj.weight": [C, I]})
    shapes["model.norm.weight"] = [C]
    if not c["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [c["vocab_size"], C]
    return shapes


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotary(x, theta):
    """x [B, heads, T, hs], rotated by rotate_half with angles t * theta^(-2i/hs)."""
    T, hs = x.shape[2], x.shape[3]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    angles = torch.arange(T).float()[:, None] * inv_freq[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    x1, x2 = x[..., : hs // 2], x[..., hs // 2:]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


def forward(p, c, tokens):
    B, T = tokens.shape
    C, H, KVH = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hs, eps = C // H, c["rms_norm_eps"]
    x = p["model.embed_tokens.weight"][tokens]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(c["num_hidden_layers"]):
        h = f"model.layers.{l}."
        a = rms_norm(x, p[h + "input_layernorm.weight"], eps)

        def proj(part):
            y = a @ p[h + f"self_attn.{part}_proj.weight"].t()
            return y + p[h + f"self_attn.{part}_proj.bias"] if c.get("attention_bias") else y

        q = proj("q").view(B, T, H, hs).transpose(1, 2)
        k = proj("k").view(B, T, KVH, hs).transpose(1, 2)
        v = proj("v").view(B, T, KVH, hs).transpose(1, 2)
        q, k = rotary(q, c["rope_theta"]), rotary(k, c["rope_theta"])
        k, v = k.repeat_interleave(H // KVH, dim=1), v.repeat_interleave(H // KVH, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[h + "self_attn.o_proj.weight"].t()
        m = rms_norm(x, p[h + "post_attention_layernorm.weight"], eps)
        m = F.silu(m @ p[h + "mlp.gate_proj.weight"].t()) * (m @ p[h + "mlp.up_proj.weight"].t())
        x = x + m @ p[h + "mlp.down_proj.weight"].t()
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if c["tie_word_embeddings"] else p["lm_head.weight"]
    return x @ head.t()


def main():
    dump, name = sys.argv[1], sys.argv[2]
    precision = sys.argv[3] if len(sys.argv) > 3 else "fp32"
    c = CONFIGS[name]
    params = random_params(llama_param_shapes(c), lambda n: n.endswith("norm.weight"))
    config = {k: v for k, v in c.items() if k not in ("B", "T")}
    config["model_type"] = "llama"
    run_parity(dump, name, precision, c, config, params, forward, masked=sys.argv[4:] == ["masked"])


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
