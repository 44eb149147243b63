// ModelSpec: the shape of a model, from a preset name or a Hugging Face style config.json.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mt {

struct ModelSpec {
  std::string name;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_embd = 0;             // C
  int64_t n_positions = 0;        // the longest sequence the position embedding covers
  int64_t vocab_size = 0;         // V
  int64_t padded_vocab_size = 0;  // Vp >= V, rows [V, Vp) of the embedding are padding
  float ln_eps = 1e-5f;

  int64_t head_dim() const { return n_embd / n_head; }
  // Parameters of the real model (without vocabulary padding), as published counts quote them.
  int64_t num_parameters() const;
};

// `model` is a preset name or the path of a JSON file with GPT-2 config.json keys (n_layer, n_head, n_embd,
// n_positions, vocab_size; others ignored). The vocabulary is padded up to a multiple of
// `pad_vocab_multiple`. Unknown names, unreadable or malformed files and inconsistent shapes are usage errors
// naming the flag or file.
ModelSpec resolve_model(const std::string& model, int64_t pad_vocab_multiple);

std::vector<std::string> preset_names();

// The spec as a Hugging Face GPT-2 config.json (which --model reads back to the same spec, padding aside).
nlohmann::json hf_config_json(const ModelSpec& spec);

}  // namespace mt
