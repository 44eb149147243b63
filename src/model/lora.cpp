#include "model/lora.h"

#include <algorithm>

#include "core/error.h"
#include "core/word_list.h"

namespace mt {

namespace {

constexpr const char* kAllLinear = "all-linear";

std::string module_of(const std::string& param_name) {
  const size_t dot = param_name.rfind('.');
  return dot == std::string::npos ? param_name : param_name.substr(0, dot);
}

}  // namespace

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> names;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    if (end > begin) names.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return names;
}

bool module_matches(const std::string& path, const std::string& name) {
  return path == name ||
         (path.size() > name.size() && path.ends_with(name) && path[path.size() - name.size() - 1] == '.');
}

bool lora_targets(const LoraConfig& lora, const std::string& path) {
  if (!lora.enabled()) return false;
  const std::vector<std::string> targets = split_names(lora.target);
  return std::ranges::any_of(
      targets, [&](const std::string& t) { return t == kAllLinear || module_matches(path, t); });
}

bool trains_base_param(const LoraConfig& lora, const std::string& param_name) {
  if (!lora.enabled()) return true;
  const std::string module = module_of(param_name);
  const std::vector<std::string> modules = split_names(lora.train_modules);
  return std::ranges::any_of(modules, [&](const std::string& m) { return module_matches(module, m); });
}

std::string lora_a_name(const std::string& module) {
  return module + ".lora_A.weight";
}
std::string lora_b_name(const std::string& module) {
  return module + ".lora_B.weight";
}
bool is_lora_a(const std::string& param_name) {
  return param_name.ends_with(".lora_A.weight");
}
bool is_lora_b(const std::string& param_name) {
  return param_name.ends_with(".lora_B.weight");
}

void check_lora_names(const LoraConfig& lora, const std::vector<std::string>& linear_modules,
                      const std::vector<std::string>& param_names) {
  if (!lora.enabled()) return;
  const std::vector<std::string> targets = split_names(lora.target);
  if (targets.empty()) fail_usage("--lora-target: expected module names or all-linear, got nothing");
  for (const std::string& t : targets)
    if (t != kAllLinear &&
        std::ranges::none_of(linear_modules, [&](const std::string& m) { return module_matches(m, t); }))
      fail_usage("--lora-target: this model has no linear module " + t + "; expected all-linear or " +
                 word_list(linear_modules, " or "));
  for (const std::string& m : split_names(lora.train_modules))
    if (std::ranges::none_of(param_names,
                             [&](const std::string& p) { return module_matches(module_of(p), m); }))
      fail_usage("--lora-train-modules: this model has no module " + m);
}

}  // namespace mt
