// PEFT's adapter_config.json read whole, as hf_config.h reads config.json: every key is one that memtrain
// honours (r, lora_alpha, target_modules), one that leaves the adapters' meaning alone (metadata, settings of
// training or of initialisation that loading does not use), or one whose value changes what the adapters
// compute, which is accepted only at the value that changes nothing (use_dora false, alpha_pattern {}, ...)
// and otherwise refused by name. A key this table does not know is accepted only when unset (null, false or
// empty), so a newer PEFT's feature is never silently dropped.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/graph_builder.h"
#include "model/lora.h"

namespace mt {

// A data error naming --init-adapter, `path`, the key and what was expected unless `config` describes the
// run's adapters: LoRA of rank lora.rank and lora_alpha lora.alpha on exactly the modules `model` adapts.
void check_peft_config(const nlohmann::json& config, const std::string& path, const ModelGraph& model,
                       const LoraConfig& lora);

}  // namespace mt
