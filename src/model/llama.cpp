#include "model/llama.h"

#include <string>

namespace mt {

// RMSNorm, RoPE on q and k, SwiGLU, every projection in nn.Linear layout [out, in], no biases but Qwen2's on
// q, k and v, a tied or untied head.
// Grouped by what they say: the layer's kind, its widths, its modules, the tensors around the layers.
// clang-format off
ModelFamily llama_family(const ModelSpec& spec) {
  return {.block = {.norm = NormKind::rmsnorm, .activation = Activation::swiglu, .rope = true, .weight_out_in = true,
                    .qkv_bias = spec.qkv_bias,
                    .qkv_width = spec.n_embd + 2 * spec.kv_dim(), .mlp_width = spec.intermediate_size,
                    .layer_prefix = "model.layers.",
                    .norm1 = "input_layernorm", .qkv_proj = "self_attn.qkv_proj", .attention = "self_attn",
                    .out_proj = "self_attn.o_proj",
                    .norm2 = "post_attention_layernorm", .up_proj = "mlp.gate_up_proj", .up_out = "mlp.gate_up",
                    .activation_name = "mlp.swiglu", .down_proj = "mlp.down_proj",
                    .qkv_modules = {{"self_attn.q_proj", spec.n_embd}, {"self_attn.k_proj", spec.kv_dim()},
                                    {"self_attn.v_proj", spec.kv_dim()}},
                    .up_modules = {{"mlp.gate_proj", spec.intermediate_size}, {"mlp.up_proj", spec.intermediate_size}}},
          .embedding = "model.embed_tokens.weight", .embed_out = "model.embed_tokens.out",
          .final_norm = "model.norm", .head = "lm_head.weight"};
}
// clang-format on

ModelGraph build_llama_graph(const ModelSpec& spec, const StepConfig& step) {
  return build_transformer_graph(spec, step, llama_family(spec));
}

InitRule llama_init_rule(const ModelSpec& spec, const TensorDesc& t) {
  if (t.name.ends_with(".bias")) return {.constant = 0.0f};
  if (t.name.ends_with("norm.weight")) return {.constant = 1.0f};
  // Only real vocabulary rows are drawn; padding rows stay zero and never change.
  const bool vocab = t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight";
  return {.stddev = 0.02f, .drawn = vocab ? spec.vocab_size * spec.n_embd : t.whole_numel()};
}

void init_llama_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed) {
  init_params(model, memory, seed, [&](const TensorDesc& t) { return llama_init_rule(spec, t); });
}

}  // namespace mt
