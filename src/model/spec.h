// ModelSpec: the shape of a model, from a preset name or a Hugging Face style config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

// GPT-2: LayerNorm, learned positions, GELU MLP of width 4C, biases, LM head tied to the embedding.
// LLaMA (LLaMA 2/3, Mistral, Qwen2): RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no
// biases except Qwen2's on q, k and v, tied or untied LM head.
enum class Arch { gpt2, llama };

struct ModelSpec {
  std::string name;
  Arch arch = Arch::gpt2;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;          // key/value heads: n_head for GPT-2, a divisor of it under GQA
  int64_t n_embd = 0;             // C
  int64_t intermediate_size = 0;  // the MLP's hidden width: 4C for GPT-2
  int64_t n_positions = 0;        // the longest sequence the positions cover
  int64_t vocab_size = 0;         // V
  int64_t padded_vocab_size = 0;  // Vp >= V, rows [V, Vp) of the embedding (and head) are padding
  float ln_eps = 1e-5f;           // LayerNorm or RMSNorm epsilon
  float rope_theta = 10000.0f;    // LLaMA: base of the rotary frequencies
  bool tied_head = true;          // the LM head is the embedding matrix
  bool qkv_bias = false;          // LLaMA family: biases on q, k and v (Qwen2)

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t kv_dim() const { return n_kv_head * head_dim(); }
  // Parameters of the real model (without vocabulary padding), as published counts quote them.
  int64_t num_parameters() const;
  // Those the model's tables hold: the embedding's (and an untied head's) rows padded to padded_vocab_size.
  int64_t padded_num_parameters() const;
};

// `model` is a preset name or the path of a JSON file: GPT-2 config.json keys (n_layer, n_head, n_embd,
// n_positions, vocab_size), or Hugging Face LLaMA/Mistral/Qwen2 keys, chosen by "arch" or "model_type"
// (see hf_config.h). The vocabulary is padded up to a multiple of `pad_vocab_multiple`. Unknown names,
// unreadable or malformed files and inconsistent shapes are usage errors naming the flag or file.
ModelSpec resolve_model(const std::string& model, int64_t pad_vocab_multiple);

std::vector<std::string> preset_names();

}  // namespace mt
