#include "model/peft_config.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace mt {

namespace {

using nlohmann::json;

bool unset(const json& v) {
  return v.is_null() || v == false || ((v.is_object() || v.is_array() || v.is_string()) && v.empty());
}

// Keys that do not change what loaded adapters compute: metadata, or settings of training (dropout: the run's
// --lora-dropout applies) and of initialisation (the file's tensors replace the initial values).
constexpr std::string_view kIgnored[] = {"task_type",         "base_model_name_or_path",
                                         "revision",          "inference_mode",
                                         "lora_dropout",      "fan_in_fan_out",
                                         "init_lora_weights", "auto_mapping",
                                         "peft_version",      "loftq_config",
                                         "eva_config",        "corda_config",
                                         "megatron_config",   "megatron_core",
                                         "runtime_config"};

// Keys that change the adapters' computation, accepted only unset: what memtrain does not implement.
constexpr std::pair<std::string_view, std::string_view> kUnsupported[] = {
    {"use_dora", "DoRA's magnitude vectors"},
    {"alpha_pattern", "a lora_alpha per module"},
    {"rank_pattern", "a rank per module"},
    {"layers_to_transform", "adapters on some layers only"},
    {"layers_pattern", "adapters on some layers only"},
    {"modules_to_save", "whole modules trained beside the adapters"},
    {"exclude_modules", "modules excluded from target_modules"},
    {"layer_replication", "replicated layers"},
    {"lora_bias", "a bias on lora_B"},
    {"trainable_token_indices", "trained token embeddings"},
    {"target_parameters", "adapters on parameters rather than modules"},
    {"use_qalora", "QA-LoRA's pooled input"},
    {"alora_invocation_tokens", "activated LoRA"}};

class PeftConfigReader {
 public:
  PeftConfigReader(const json& config, const std::string& path) : config_(config), path_(path) {}

  const json& at(const char* key) const {
    static const json absent;
    return config_.contains(key) ? config_.at(key) : absent;
  }
  [[noreturn]] void refuse(const std::string& key, const std::string& expected) const {
    const json& v = config_.contains(key) ? config_.at(key) : json();
    fail_data("--init-adapter " + path_ + ": \"" + key + "\" is " + (v.is_null() ? "absent" : v.dump()) +
              ", expected " + expected);
  }

 private:
  const json& config_;
  const std::string& path_;
};

// The modules `model` has adapters on, as paths ("h.0.attn.c_attn").
std::vector<std::string> adapted_modules(const ModelGraph& model) {
  std::vector<std::string> modules;
  for (int id : model.params)
    if (const std::string& n = model.graph.table[id].name; is_lora_a(n))
      modules.push_back(n.substr(0, n.size() - lora_a_name("").size()));
  return modules;
}

// target_modules must select exactly the run's adapted modules (PEFT's matching: a name matches a path or its
// last components), each name at least one of them.
void check_targets(const PeftConfigReader& r, const ModelGraph& model, const LoraConfig& lora) {
  const json& targets = r.at("target_modules");
  const std::string run = "the modules --lora-target " + lora.target + " adapts";
  if (targets == "all-linear" && lora.target == "all-linear") return;
  if (!targets.is_array() || targets.empty() ||
      !std::ranges::all_of(targets, [](const json& t) { return t.is_string(); }))
    r.refuse("target_modules",
             "a list of module names (a regular expression is not supported) matching " + run);
  const std::vector<std::string> modules = adapted_modules(model);
  for (const json& t : targets)
    if (std::ranges::none_of(modules,
                             [&](const std::string& m) { return module_matches(m, t.get<std::string>()); }))
      r.refuse("target_modules", run + ", which " + t.dump() + " is not one of");
  for (const std::string& m : modules)
    if (std::ranges::none_of(targets, [&](const json& t) { return module_matches(m, t.get<std::string>()); }))
      r.refuse("target_modules", "names that cover " + run + ", " + m + " among them");
}

}  // namespace

void check_peft_config(const json& config, const std::string& path, const ModelGraph& model,
                       const LoraConfig& lora) {
  if (!config.is_object()) fail_data("--init-adapter " + path + ": expected a JSON object");
  const PeftConfigReader r(config, path);
  if (r.at("peft_type") != "LORA") r.refuse("peft_type", "\"LORA\"");
  if (!r.at("r").is_number_integer() || r.at("r").get<int64_t>() != lora.rank)
    r.refuse("r", std::to_string(lora.rank) + " (--lora-rank)");
  if (!r.at("lora_alpha").is_number() || r.at("lora_alpha").get<double>() != static_cast<double>(lora.alpha))
    r.refuse("lora_alpha", json(lora.alpha).dump() + " (--lora-alpha)");
  if (!unset(r.at("bias")) && r.at("bias") != "none") r.refuse("bias", "\"none\" (no trained biases)");
  if (!(r.at("use_rslora").is_null() || r.at("use_rslora").is_boolean()) ||
      !unset(r.at("use_rslora")) != lora.rslora)
    r.refuse("use_rslora", lora.rslora ? "true (--lora-rslora)" : "false or absent (no --lora-rslora)");
  check_targets(r, model, lora);
  const std::set<std::string_view> honoured = {"peft_type",  "r",    "lora_alpha",
                                               "use_rslora", "bias", "target_modules"};
  for (const auto& [key, value] : config.items()) {
    if (honoured.contains(key) || std::ranges::find(kIgnored, key) != std::end(kIgnored)) continue;
    const auto known =
        std::ranges::find(kUnsupported, key, &std::pair<std::string_view, std::string_view>::first);
    if (unset(value)) continue;
    r.refuse(key, known != std::end(kUnsupported)
                      ? "unset: memtrain does not implement " + std::string(known->second)
                      : std::string("unset: memtrain does not know this key"));
  }
}

}  // namespace mt
