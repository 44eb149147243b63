// The transformer step every family shares, forward and backward under a recompute policy. A family
// (gpt2.cpp, llama.cpp) supplies only what differs: LayerNorm or RMSNorm, GELU or SwiGLU, RoPE, the weight
// layout, biases, widths and its Hugging Face names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/graph_builder.h"
#include "model/spec.h"

namespace mt {

// One Hugging Face linear module inside a fused projection: its name (relative to the layer) and output
// columns, in the fused order. LoRA puts one adapter on each, as PEFT does on the unfused model.
struct HfLinear {
  std::string name;
  int64_t width = 0;
};

// What a family's layer is. Every family's layer is
//   x -> norm1 -> qkv projection [-> RoPE] -> attention -> output projection (+ x)
//     -> norm2 -> up projection -> activation -> down projection (+ the residual after attention);
// names are relative to the layer's prefix (`layer_prefix` + index + "."), and each parameter is the module's
// name + ".weight" or ".bias".
struct BlockFamily {
  NormKind norm = NormKind::layernorm;  // LayerNorm has a bias, RMSNorm none
  Activation activation = Activation::gelu;
  bool rope = false;
  bool weight_out_in = false;  // projections in torch.nn.Linear layout [out, in], else Conv1D's [in, out]
  bool biases = false;         // every projection has a bias
  bool qkv_bias = false;       // only the qkv projection has one (Qwen2)
  int64_t qkv_width = 0;       // C + 2 KV
  int64_t mlp_width = 0;       // the activation's output; its input is twice that under SwiGLU
  std::string layer_prefix;
  std::string norm1, qkv_proj, attention, out_proj, norm2, up_proj, up_out, activation_name, down_proj;
  // The Hugging Face modules fused into qkv_proj and up_proj; empty: the projection is one module.
  std::vector<HfLinear> qkv_modules = {}, up_modules = {};
};

// A family's whole model: its layer and the tensors around the layers, by Hugging Face name.
struct ModelFamily {
  BlockFamily block;
  std::string embedding = {};  // the token embedding's weight [Vp, C]
  std::string positions = {};  // a learned position embedding's weight [n_positions, C]; empty: none
  std::string embed_out = {};  // the embedding's output
  std::string final_norm = {};
  std::string head = {};  // an untied LM head's weight [Vp, C]; empty, or spec.tied_head: the embedding
};

// The step of a family: embedding, the layers, the final norm, the LM head + loss, their backward under the
// step's recompute policy, then the lifetimes. Parameters are created block by block (TensorDesc::block): the
// embeddings, each layer, then the final norm with an untied head.
ModelGraph build_transformer_graph(const ModelSpec& spec, const StepConfig& step, const ModelFamily& family);

}  // namespace mt
