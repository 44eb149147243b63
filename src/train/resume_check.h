// What a resume compares between a checkpoint and this run, named key by key: the model's config.json and
// the run settings (config/run_flag_table.h: run_settings) that differ.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mt {

// "n_layer is 4 here but 2 in the checkpoint" for each key of two model configs that differs (a missing key
// is "absent"), joined by ", " in key order; empty when they are equal.
std::string model_differences(const nlohmann::json& saved, const nlohmann::json& here);

// The same for the settings a checkpoint saved, keyed by flag: the table's flags in its order, then any the
// table no longer has. A setting newer than the checkpoint is not compared, nor a flag this run neither
// records nor counts as shaping the trajectory (one an older memtrain recorded).
std::string setting_differences(const nlohmann::json& saved, const nlohmann::json& here);

}  // namespace mt
