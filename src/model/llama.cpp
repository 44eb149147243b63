#include "model/llama.h"

#include <string>

#include "model/init.h"

namespace mt {

namespace {

std::string layer_prefix(int64_t l) {
  return "model.layers." + std::to_string(l) + ".";
}

std::vector<LayerParams> llama_layer_params(GraphBuilder& b, const ModelSpec& spec) {
  const int64_t C = spec.n_embd, QKV = spec.n_embd + 2 * spec.kv_dim(), I = spec.intermediate_size;
  std::vector<LayerParams> layers;
  for (int64_t l = 0; l < spec.n_layer; ++l) {
    const std::string h = layer_prefix(l);
    b.begin_block();
    LayerParams p;
    p.norm1.weight = b.param(h + "input_layernorm.weight", {C});
    p.qkv.weight = b.param(h + "self_attn.qkv_proj.weight", {QKV, C});
    if (spec.qkv_bias) p.qkv.bias = b.param(h + "self_attn.qkv_proj.bias", {QKV});
    p.out.weight = b.param(h + "self_attn.o_proj.weight", {C, C});
    p.norm2.weight = b.param(h + "post_attention_layernorm.weight", {C});
    p.up.weight = b.param(h + "mlp.gate_up_proj.weight", {2 * I, C});
    p.down.weight = b.param(h + "mlp.down_proj.weight", {C, I});
    layers.push_back(p);
  }
  return layers;
}

// RMSNorm, RoPE on q and k, SwiGLU, every projection in nn.Linear layout [out, in].
BlockFamily llama_family(const ModelSpec& spec) {
  return {.norm = NormKind::rmsnorm,
          .activation = Activation::swiglu,
          .rope = true,
          .weight_out_in = true,
          .qkv_width = spec.n_embd + 2 * spec.kv_dim(),
          .mlp_width = spec.intermediate_size,
          .layer_prefix = "model.layers.",
          .norm1 = "input_layernorm",
          .qkv_proj = "self_attn.qkv_proj",
          .attention = "self_attn",
          .out_proj = "self_attn.o_proj",
          .norm2 = "post_attention_layernorm",
          .up_proj = "mlp.gate_up_proj",
          .up_out = "mlp.gate_up",
          .activation_name = "mlp.swiglu",
          .down_proj = "mlp.down_proj"};
}

}  // namespace

ModelGraph build_llama_graph(const ModelSpec& spec, const StepConfig& step) {
  const int64_t C = spec.n_embd, Vp = spec.padded_vocab_size;
  ModelGraph m;
  GraphBuilder b(m, step);
  StepParams p;
  p.wte = b.param("model.embed_tokens.weight", {Vp, C});
  TransformerBlocks blocks(b, spec, llama_family(spec), llama_layer_params(b, spec));
  b.begin_block();  // the final norm and an untied head: one block, as their ops run back to back
  p.final_norm.weight = b.param("model.norm.weight", {C});
  p.head = spec.tied_head ? p.wte : b.param("lm_head.weight", {Vp, C});
  p.embed_out = "model.embed_tokens.out";
  p.final_norm_name = "model.norm";
  emit_step(b, blocks, spec, NormKind::rmsnorm, p);
  return m;
}

void init_llama_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed) {
  init_params(model, memory, seed, [&](const TensorDesc& t) -> InitRule {
    if (t.name.ends_with(".bias")) return {.constant = 0.0f};
    if (t.name.ends_with("norm.weight")) return {.constant = 1.0f};
    // Only real vocabulary rows are drawn; padding rows stay zero and never change.
    const bool vocab = t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight";
    return {.stddev = 0.02f, .drawn = vocab ? spec.vocab_size * spec.n_embd : t.numel()};
  });
}

}  // namespace mt
