#include "model/peft_adapter.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "model/hf_tensors.h"
#include "model/peft_config.h"
#include "model/weights.h"

namespace mt {

namespace {

// The Hugging Face module path of one of our parameter names: GPT-2's transformer lives under "transformer.".
std::string hf_path(const ModelSpec& spec, const std::string& name) {
  return spec.arch == Arch::gpt2 ? "transformer." + name : name;
}

std::string module_of_adapter(const std::string& param_name) {
  return param_name.substr(0, param_name.size() - lora_a_name("").size());
}

// PEFT resolves all-linear to the adapted modules' last names; names given explicitly are kept as given.
nlohmann::json target_modules(const ModelGraph& model, const LoraConfig& lora) {
  if (lora.target != "all-linear") return split_names(lora.target);
  std::set<std::string> names;
  for (int id : model.params)
    if (const std::string& n = model.graph.table[id].name; is_lora_a(n)) {
      const std::string module = module_of_adapter(n);
      names.insert(module.substr(module.rfind('.') + 1));
    }
  return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace

std::string peft_base_name(const std::string& init_from, const std::string& model) {
  return init_from.empty() ? model : init_from;
}

std::vector<FileTensor> peft_adapter_tensors(const ModelSpec& spec, const ModelGraph& model) {
  std::vector<FileTensor> adapters;
  for (int id : model.params)
    if (const TensorDesc& t = model.graph.table[id]; is_lora_a(t.name) || is_lora_b(t.name))
      adapters.push_back({peft_adapter_key(spec, t.name), id, 0, t.shape});
  return adapters;
}

nlohmann::json peft_adapter_config(const ModelSpec& spec, const ModelGraph& model, const LoraConfig& lora,
                                   const std::string& base) {
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"r", lora.rank},
          {"lora_alpha", lora.alpha},
          {"use_rslora", lora.rslora},
          {"lora_dropout", lora.dropout},
          {"target_modules", target_modules(model, lora)},
          {"bias", "none"},
          {"fan_in_fan_out", peft_fan_in_fan_out(spec)},
          {"modules_to_save", nullptr},
          {"base_model_name_or_path", base},
          {"inference_mode", true}};
}

bool peft_fan_in_fan_out(const ModelSpec& spec) {
  return spec.arch == Arch::gpt2;
}

std::string peft_adapter_key(const ModelSpec& spec, const std::string& param_name) {
  return "base_model.model." + hf_path(spec, param_name);
}

void load_peft_adapter(const std::string& dir, const ModelSpec& spec, const ModelGraph& model,
                       Allocation& memory, const LoraConfig& lora) {
  const std::string config_path = dir + "/" + kPeftConfigFile;
  std::ifstream in(config_path);
  if (!in) fail_data("--init-adapter " + dir + ": cannot read " + config_path);
  nlohmann::json config;
  try {
    in >> config;
  } catch (const nlohmann::json::exception& e) {
    fail_data("--init-adapter " + config_path + ": not valid JSON (" + e.what() + ")");
  }
  check_peft_config(config, config_path, model, lora);
  load_weight_file(dir + "/" + kPeftAdapterFile, peft_adapter_tensors(spec, model), memory);
}

void save_peft_adapter(const std::string& dir, const ModelSpec& spec, const ModelGraph& model,
                       const Allocation& memory, const LoraConfig& lora, const std::string& base) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail_data("--save-adapter " + dir + ": cannot create directory: " + ec.message());
  write_weight_file(dir + "/" + kPeftAdapterFile, peft_adapter_tensors(spec, model), memory);
  write_file_atomically(dir + "/" + kPeftConfigFile,
                        peft_adapter_config(spec, model, lora, base).dump(2) + "\n");
}

}  // namespace mt
