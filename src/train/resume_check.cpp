#include "train/resume_check.h"

#include <set>
#include <vector>

#include "config/run_flag_table.h"

namespace mt {

namespace {

std::string value_text(const nlohmann::json& object, const std::string& key) {
  return object.contains(key) ? object.at(key).dump() : "absent";
}

// The keys among `keys` whose values differ, as "KEY is HERE here but SAVED in the checkpoint".
std::string differences(const std::vector<std::string>& keys, const nlohmann::json& saved,
                        const nlohmann::json& here) {
  std::string text;
  for (const std::string& key : keys) {
    if (saved.contains(key) == here.contains(key) && (!saved.contains(key) || saved.at(key) == here.at(key)))
      continue;
    text += (text.empty() ? "" : ", ") + key + " is " + value_text(here, key) + " here but " +
            value_text(saved, key) + " in the checkpoint";
  }
  return text;
}

}  // namespace

std::string model_differences(const nlohmann::json& saved, const nlohmann::json& here) {
  std::set<std::string> keys;
  for (const nlohmann::json* config : {&saved, &here})
    for (const auto& [key, value] : config->items()) keys.insert(key);
  return differences({keys.begin(), keys.end()}, saved, here);
}

std::string setting_differences(const nlohmann::json& saved, const nlohmann::json& here) {
  std::vector<std::string> keys;
  std::set<std::string> in_table;
  // Older checkpoints may record flags that no longer shape the trajectory (--micro-batch-size, before
  // samples were numbered globally): only what this run records is compared.
  for (const RunFlag& flag : run_flag_table()) {
    in_table.emplace(flag.name());
    if (saved.contains(flag.name()) && (flag.trajectory || here.contains(flag.name())))
      keys.emplace_back(flag.name());
  }
  for (const auto& [key, value] : saved.items())
    if (!in_table.contains(key)) keys.push_back(key);
  return differences(keys, saved, here);
}

}  // namespace mt
