// A run's LoRA adapters in Hugging Face PEFT's layout, which PeftModel.from_pretrained reads:
// DIR/adapter_model.safetensors (base_model.model.<module>.lora_A.weight [r, in] and .lora_B.weight [out, r],
// <module> the Hugging Face path: GPT-2's under transformer.) and DIR/adapter_config.json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memory/allocation.h"
#include "model/graph_builder.h"
#include "model/hf_tensors.h"
#include "model/spec.h"

namespace mt {

inline constexpr const char* kPeftAdapterFile = "adapter_model.safetensors";
inline constexpr const char* kPeftConfigFile = "adapter_config.json";

// PEFT's fan_in_fan_out: the family's weights are Conv1D [in, out] (GPT-2), not nn.Linear [out, in].
bool peft_fan_in_fan_out(const ModelSpec& spec);

// The PEFT key of one of our adapter parameters ("h.0.attn.c_attn.lora_A.weight").
std::string peft_adapter_key(const ModelSpec& spec, const std::string& param_name);

// base_model_name_or_path: the --init-from the base was read from, else the --model it was drawn for.
std::string peft_base_name(const std::string& init_from, const std::string& model);

// The run's adapters under their PEFT keys, in parameter order.
std::vector<FileTensor> peft_adapter_tensors(const ModelSpec& spec, const ModelGraph& model);

// adapter_config.json for `model`'s adapters; `base` is its base_model_name_or_path.
nlohmann::json peft_adapter_config(const ModelSpec& spec, const ModelGraph& model, const LoraConfig& lora,
                                   const std::string& base);

// Writes both files into `dir` (created when missing), each atomically; the adapters in fp32 when this rank
// holds the master copy whole, else in the weights' dtype. `base` names the base model in the config.
// Reads an adapter directory of that layout (ours or PEFT's) into the run's adapters. Its config must
// describe them (check_peft_config: LoRA with the run's r, lora_alpha, use_rslora and modules, nothing it
// does not implement), and its tensors be exactly the run's adapters: a data error naming --init-adapter and
// the file otherwise.
void load_peft_adapter(const std::string& dir, const ModelSpec& spec, const ModelGraph& model,
                       Allocation& memory, const LoraConfig& lora);

void save_peft_adapter(const std::string& dir, const ModelSpec& spec, const ModelGraph& model,
                       const Allocation& memory, const LoraConfig& lora, const std::string& base);

}  // namespace mt
