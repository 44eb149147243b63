#include "model/gpt2.h"

#include <cmath>
#include <string>

namespace mt {

// LayerNorm, biases on every projection, fused c_attn in Conv1D layout [in, out], GELU, learned positions and
// a tied head.
// Grouped by what they say: the layer's kind, its widths, its modules, the tensors around the layers.
// clang-format off
ModelFamily gpt2_family(const ModelSpec& spec) {
  return {.block = {.norm = NormKind::layernorm, .activation = Activation::gelu, .biases = true,
                    .qkv_width = 3 * spec.n_embd, .mlp_width = 4 * spec.n_embd, .layer_prefix = "h.",
                    .norm1 = "ln_1", .qkv_proj = "attn.c_attn", .attention = "attn", .out_proj = "attn.c_proj",
                    .norm2 = "ln_2", .up_proj = "mlp.c_fc", .up_out = "mlp.fc", .activation_name = "mlp.gelu",
                    .down_proj = "mlp.c_proj"},
          .embedding = "wte.weight", .positions = "wpe.weight", .embed_out = "embed.out", .final_norm = "ln_f"};
}
// clang-format on

ModelGraph build_gpt2_graph(const ModelSpec& spec, const StepConfig& step) {
  return build_transformer_graph(spec, step, gpt2_family(spec));
}

InitRule gpt2_init_rule(const ModelSpec& spec, const TensorDesc& t) {
  if (t.name.ends_with(".bias")) return {.constant = 0.0f};
  if (t.name.find("ln_") != std::string::npos) return {.constant = 1.0f};
  const float stddev =
      t.name.ends_with("c_proj.weight") ? 0.02f / std::sqrt(2.0f * static_cast<float>(spec.n_layer)) : 0.02f;
  // Only real vocabulary rows are drawn; padding rows stay zero and never change.
  return {.stddev = stddev,
          .drawn = t.name == "wte.weight" ? spec.vocab_size * spec.n_embd : t.whole_numel()};
}

void init_gpt2_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed) {
  init_params(model, memory, seed, [&](const TensorDesc& t) { return gpt2_init_rule(spec, t); });
}

}  // namespace mt
