#include "model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_text.h"

namespace mt {

namespace {

std::string quoted(const char* key) {
  std::string q = "\"";
  q += key;
  q += '"';
  return q;
}

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& config, const std::string& path) : config_(config), path_(path) {}

  int64_t dim(const char* key) const {
    if (!config_.contains(key)) fail("missing key \"" + std::string(key) + "\"");
    return positive(key);
  }
  int64_t dim_or(const char* key, int64_t fallback) const { return present(key) ? positive(key) : fallback; }
  // A positive number that stays finite and positive as the float the kernels use.
  float number_or(const char* key, float fallback) const {
    if (!config_.contains(key)) return fallback;
    const nlohmann::json& v = config_.at(key);
    const float f = v.is_number() ? v.get<float>() : 0.0f;
    if (!(f > 0) || !std::isfinite(f))
      fail(quoted(key) + " must be a positive finite number, got " + v.dump());
    return f;
  }
  bool flag_or(const char* key, bool fallback) const {
    if (!config_.contains(key)) return fallback;
    if (!config_.at(key).is_boolean()) fail(quoted(key) + " must be true or false");
    return config_.at(key).get<bool>();
  }
  std::string text_or(const char* key, const std::string& fallback) const {
    if (!config_.contains(key)) return fallback;
    if (!config_.at(key).is_string()) fail(quoted(key) + " must be a string");
    return config_.at(key).get<std::string>();
  }
  bool present(const char* key) const { return config_.contains(key) && !config_.at(key).is_null(); }
  [[noreturn]] void fail(const std::string& what) const { fail_usage("--model " + path_ + ": " + what); }

 private:
  int64_t positive(const char* key) const {
    const nlohmann::json& v = config_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() <= 0) fail(quoted(key) + " must be a positive integer");
    return v.get<int64_t>();
  }

  const nlohmann::json& config_;
  const std::string& path_;
};

ModelSpec gpt2_config(const ConfigReader& r) {
  ModelSpec s;
  s.arch = Arch::gpt2;
  s.n_layer = r.dim("n_layer");
  s.n_head = s.n_kv_head = r.dim("n_head");
  s.n_embd = r.dim("n_embd");
  s.intermediate_size = 4 * s.n_embd;
  s.n_positions = r.dim("n_positions");
  s.vocab_size = r.dim("vocab_size");
  s.ln_eps = r.number_or("layer_norm_epsilon", s.ln_eps);
  // The rest of GPT-2's shape is fixed here: an MLP of 4C, the tanh GELU, the tied head.
  if (r.dim_or("n_inner", s.intermediate_size) != s.intermediate_size)
    r.fail("\"n_inner\" other than 4 * n_embd is not supported");
  const std::string activation = r.text_or("activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    r.fail("\"activation_function\" must be gelu_new or gelu_pytorch_tanh (GELU's tanh form), got " +
           activation);
  if (!r.flag_or("tie_word_embeddings", true))
    r.fail("\"tie_word_embeddings\" false is not supported for GPT-2");
  return s;
}

ModelSpec llama_config(const ConfigReader& r, const std::string& model_type) {
  ModelSpec s;
  s.arch = Arch::llama;
  s.n_layer = r.dim("num_hidden_layers");
  s.n_head = r.dim("num_attention_heads");
  s.n_kv_head = r.dim_or("num_key_value_heads", s.n_head);
  s.n_embd = r.dim("hidden_size");
  s.intermediate_size = r.dim("intermediate_size");
  s.n_positions = r.dim("max_position_embeddings");
  // Sliding-window attention (Mistral v0.1) equals full causal attention on sequences no longer than the
  // window: the window bounds the sequence length instead.
  if (r.present("sliding_window") && r.flag_or("use_sliding_window", true))
    s.n_positions = std::min(s.n_positions, r.dim("sliding_window"));
  s.vocab_size = r.dim("vocab_size");
  s.ln_eps = r.number_or("rms_norm_eps", 1e-6f);
  s.rope_theta = r.number_or("rope_theta", 10000.0f);
  s.tied_head = r.flag_or("tie_word_embeddings", false);
  s.qkv_bias = r.flag_or("attention_bias", model_type == "qwen2");
  if (s.n_embd % s.n_head == 0 && r.dim_or("head_dim", s.n_embd / s.n_head) != s.n_embd / s.n_head)
    r.fail("\"head_dim\" other than hidden_size / num_attention_heads is not supported");
  if (r.text_or("hidden_act", "silu") != "silu") r.fail("\"hidden_act\" must be silu (SwiGLU)");
  // Scaled rotary frequencies (LLaMA 3.1's "llama3", YaRN, ...) would train a different model: refuse them.
  if (r.present("rope_scaling")) r.fail("\"rope_scaling\" is not supported (plain rotary embeddings only)");
  return s;
}

}  // namespace

ModelSpec read_model_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    fail_usage("--model " + path + ": not a preset (" + names + ") and not a readable config file");
  }
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return model_config(parse_json_text(text, "--model " + path, /*usage=*/true), path);
}

ModelSpec model_config(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) fail_usage("--model " + path + ": expected a JSON object");
  const ConfigReader r(config, path);
  const std::string model_type = r.text_or("model_type", "");
  if (!model_type.empty() && model_type != "gpt2" && model_type != "llama" && model_type != "mistral" &&
      model_type != "qwen2")
    r.fail("\"model_type\" " + model_type + " is not supported: expected gpt2, llama, mistral or qwen2");
  const std::string family = model_type.empty() || model_type == "gpt2" ? "gpt2" : "llama";
  const std::string arch = r.text_or("arch", family);
  if (arch != "gpt2" && arch != "llama")
    r.fail("\"arch\" " + arch + " is not supported: expected gpt2 or llama");
  if (!model_type.empty() && arch != family)
    r.fail("\"arch\" " + arch + " contradicts \"model_type\" " + model_type + " (" + family + ")");
  return arch == "gpt2" ? gpt2_config(r) : llama_config(r, model_type);
}

nlohmann::json hf_config_json(const ModelSpec& spec) {
  if (spec.arch == Arch::gpt2)
    return {{"model_type", "gpt2"},
            {"architectures", {"GPT2LMHeadModel"}},
            {"n_layer", spec.n_layer},
            {"n_head", spec.n_head},
            {"n_embd", spec.n_embd},
            {"n_positions", spec.n_positions},
            {"n_ctx", spec.n_positions},
            {"vocab_size", spec.vocab_size},
            {"layer_norm_epsilon", spec.ln_eps}};
  return {{"model_type", "llama"},
          {"architectures", {"LlamaForCausalLM"}},
          {"num_hidden_layers", spec.n_layer},
          {"num_attention_heads", spec.n_head},
          {"num_key_value_heads", spec.n_kv_head},
          {"hidden_size", spec.n_embd},
          {"intermediate_size", spec.intermediate_size},
          {"max_position_embeddings", spec.n_positions},
          {"vocab_size", spec.vocab_size},
          {"rms_norm_eps", spec.ln_eps},
          {"rope_theta", spec.rope_theta},
          {"tie_word_embeddings", spec.tied_head},
          {"attention_bias", spec.qkv_bias},
          {"hidden_act", "silu"}};
}

}  // namespace mt
