// A model's shape as a JSON config: GPT-2's keys, or Hugging Face's LLaMA-family config.json; read and
// written.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/spec.h"

namespace mt {

// The architecture is "model_type" (gpt2; llama, mistral, qwen2; any other is refused), else "arch" ("gpt2"
// or "llama", which must agree with a model_type), else GPT-2. GPT-2 keys: n_layer, n_head, n_embd,
// n_positions, vocab_size, layer_norm_epsilon (default 1e-5); n_inner other than 4 * n_embd, an
// activation_function other than GELU's tanh form and an untied head are refused. LLaMA keys:
// num_hidden_layers, num_attention_heads, num_key_value_heads (default: no GQA), hidden_size,
// intermediate_size, max_position_embeddings, vocab_size, rms_norm_eps, rope_theta, tie_word_embeddings
// (default false), attention_bias (Qwen2: true); a used sliding_window bounds the sequence length;
// rope_scaling and a hidden_act other than silu are refused. Epsilons and rope_theta must be positive and
// finite as floats. Errors are usage errors naming the file and the key. The result has no name and no
// padded vocabulary yet.
ModelSpec read_model_config(const std::string& path);
// The same from a parsed config, `path` naming where it came from in the errors.
ModelSpec model_config(const nlohmann::json& config, const std::string& path);

// The spec as a Hugging Face config.json, GPT2LMHeadModel or LlamaForCausalLM, which read_model_config reads
// back to the same spec (name and vocabulary padding aside).
nlohmann::json hf_config_json(const ModelSpec& spec);

}  // namespace mt
