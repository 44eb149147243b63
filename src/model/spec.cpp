#include "model/spec.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace mt {

namespace {

struct Preset {
  int64_t n_layer, n_head, n_embd, n_positions, vocab_size;
};

// GPT-2's published shapes, and small ones sized for tests and the 2-core demo.
const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> table = {
      {"gpt2", {12, 12, 768, 1024, 50257}},        {"gpt2-medium", {24, 16, 1024, 1024, 50257}},
      {"gpt2-large", {36, 20, 1280, 1024, 50257}}, {"gpt2-xl", {48, 25, 1600, 1024, 50257}},
      {"gpt2-tiny", {2, 4, 64, 128, 256}},         {"gpt2-demo", {4, 4, 128, 256, 50257}},
  };
  return table;
}

int64_t json_dim(const nlohmann::json& config, const char* key, const std::string& path) {
  if (!config.contains(key)) fail_usage("--model " + path + ": missing key \"" + key + "\"");
  const nlohmann::json& v = config.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0)
    fail_usage("--model " + path + ": \"" + key + "\" must be a positive integer");
  return v.get<int64_t>();
}

Preset read_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    fail_usage("--model " + path + ": not a preset (" + names + ") and not a readable config file");
  }
  nlohmann::json config;
  try {
    in >> config;
  } catch (const nlohmann::json::exception& e) {
    fail_usage("--model " + path + ": not valid JSON (" + e.what() + ")");
  }
  if (!config.is_object()) fail_usage("--model " + path + ": expected a JSON object");
  return {json_dim(config, "n_layer", path), json_dim(config, "n_head", path),
          json_dim(config, "n_embd", path), json_dim(config, "n_positions", path),
          json_dim(config, "vocab_size", path)};
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, p] : presets()) names.push_back(name);
  return names;
}

int64_t ModelSpec::num_parameters() const {
  const int64_t C = n_embd;
  const int64_t per_layer = 2 * C                // ln_1
                            + C * 3 * C + 3 * C  // attn.c_attn
                            + C * C + C          // attn.c_proj
                            + 2 * C              // ln_2
                            + C * 4 * C + 4 * C  // mlp.c_fc
                            + 4 * C * C + C;     // mlp.c_proj
  return vocab_size * C + n_positions * C + n_layer * per_layer + 2 * C;
}

ModelSpec resolve_model(const std::string& model, int64_t pad_vocab_multiple) {
  if (pad_vocab_multiple < 1) fail_usage("--make-vocab-size-divisible-by must be at least 1");
  const auto it = presets().find(model);
  const Preset p = it != presets().end() ? it->second : read_config(model);
  ModelSpec spec;
  spec.name = model;
  spec.n_layer = p.n_layer;
  spec.n_head = p.n_head;
  spec.n_embd = p.n_embd;
  spec.n_positions = p.n_positions;
  spec.vocab_size = p.vocab_size;
  spec.padded_vocab_size = (p.vocab_size + pad_vocab_multiple - 1) / pad_vocab_multiple * pad_vocab_multiple;
  if (spec.n_embd % spec.n_head != 0)
    fail_usage("--model " + model + ": n_embd " + std::to_string(spec.n_embd) +
               " is not divisible by n_head " + std::to_string(spec.n_head));
  return spec;
}

nlohmann::json hf_config_json(const ModelSpec& spec) {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"n_layer", spec.n_layer},
          {"n_head", spec.n_head},
          {"n_embd", spec.n_embd},
          {"n_positions", spec.n_positions},
          {"n_ctx", spec.n_positions},
          {"vocab_size", spec.vocab_size},
          {"layer_norm_epsilon", spec.ln_eps}};
}

}  // namespace mt
