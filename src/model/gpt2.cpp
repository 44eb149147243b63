#include "model/gpt2.h"

#include <cmath>
#include <string>

#include "model/init.h"

namespace mt {

namespace {

std::vector<LayerParams> gpt2_layer_params(GraphBuilder& b, const ModelSpec& spec) {
  const int64_t C = spec.n_embd;
  std::vector<LayerParams> layers;
  for (int64_t l = 0; l < spec.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    b.begin_block();
    LayerParams p;
    p.norm1 = {b.param(h + "ln_1.weight", {C}), b.param(h + "ln_1.bias", {C})};
    p.qkv = {b.param(h + "attn.c_attn.weight", {C, 3 * C}), b.param(h + "attn.c_attn.bias", {3 * C})};
    p.out = {b.param(h + "attn.c_proj.weight", {C, C}), b.param(h + "attn.c_proj.bias", {C})};
    p.norm2 = {b.param(h + "ln_2.weight", {C}), b.param(h + "ln_2.bias", {C})};
    p.up = {b.param(h + "mlp.c_fc.weight", {C, 4 * C}), b.param(h + "mlp.c_fc.bias", {4 * C})};
    p.down = {b.param(h + "mlp.c_proj.weight", {4 * C, C}), b.param(h + "mlp.c_proj.bias", {C})};
    layers.push_back(p);
  }
  return layers;
}

// LayerNorm, fused c_attn in Conv1D layout [in, out], GELU.
BlockFamily gpt2_family(const ModelSpec& spec) {
  return {.norm = NormKind::layernorm,
          .activation = Activation::gelu,
          .qkv_width = 3 * spec.n_embd,
          .mlp_width = 4 * spec.n_embd,
          .layer_prefix = "h.",
          .norm1 = "ln_1",
          .qkv_proj = "attn.c_attn",
          .attention = "attn",
          .out_proj = "attn.c_proj",
          .norm2 = "ln_2",
          .up_proj = "mlp.c_fc",
          .up_out = "mlp.fc",
          .activation_name = "mlp.gelu",
          .down_proj = "mlp.c_proj"};
}

}  // namespace

ModelGraph build_gpt2_graph(const ModelSpec& spec, const StepConfig& step) {
  const int64_t C = spec.n_embd;
  ModelGraph m;
  GraphBuilder b(m, step);
  StepParams p;
  p.wte = b.param("wte.weight", {spec.padded_vocab_size, C});
  p.wpe = b.param("wpe.weight", {spec.n_positions, C});
  TransformerBlocks blocks(b, spec, gpt2_family(spec), gpt2_layer_params(b, spec));
  b.begin_block();
  p.final_norm = {b.param("ln_f.weight", {C}), b.param("ln_f.bias", {C})};
  p.head = p.wte;  // tied
  p.embed_out = "embed.out";
  p.final_norm_name = "ln_f";
  emit_step(b, blocks, spec, NormKind::layernorm, p);
  return m;
}

void init_gpt2_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed) {
  init_params(model, memory, seed, [&](const TensorDesc& t) -> InitRule {
    if (t.name.ends_with(".bias")) return {.constant = 0.0f};
    if (t.name.find("ln_") != std::string::npos) return {.constant = 1.0f};
    const float stddev = t.name.ends_with("c_proj.weight")
                             ? 0.02f / std::sqrt(2.0f * static_cast<float>(spec.n_layer))
                             : 0.02f;
    // Only real vocabulary rows are drawn; padding rows stay zero and never change.
    return {.stddev = stddev, .drawn = t.name == "wte.weight" ? spec.vocab_size * spec.n_embd : t.numel()};
  });
}

}  // namespace mt
