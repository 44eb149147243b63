// LoRA (Hu et al., 2021) as Hugging Face PEFT applies it to a linear module: y = x W^T + (alpha / r) *
// dropout(x) A^T B^T with A [r, in] Kaiming-uniform and B [out, r] zero. Under LoRA every base parameter is
// frozen (TensorDesc category `frozen`: no gradient, no optimizer state, outside the flat trainable range)
// unless --lora-train-modules names its module; the adapters are the trainable parameters.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace mt {

struct LoraConfig {
  int64_t rank = 0;                   // r; 0: no LoRA
  float alpha = 8.0f;                 // PEFT's default lora_alpha
  float dropout = 0.0f;               // on the adapter's input only
  std::string target = "all-linear";  // Hugging Face module names, comma-separated, or all-linear
  std::string train_modules = {};     // base modules trained in full too (PEFT's modules_to_save)
  bool rslora = false;                // PEFT's use_rslora: rank-stabilised scaling (Kalajdzievski, 2023)

  bool enabled() const { return rank > 0; }
  // PEFT's: alpha / r, or alpha / sqrt(r) with rslora.
  float scaling() const {
    return alpha / (rslora ? std::sqrt(static_cast<float>(rank)) : static_cast<float>(rank));
  }
};

// A comma-separated list's items, without empty ones.
std::vector<std::string> split_names(const std::string& list);

// PEFT's matching of a module path by a configured name: the whole path or its last dot-separated
// components ("c_proj" matches "attn.c_proj" and "mlp.c_proj").
bool module_matches(const std::string& path, const std::string& name);

// Whether --lora-target puts an adapter on the layer's linear module at `path` ("self_attn.q_proj").
bool lora_targets(const LoraConfig& lora, const std::string& path);

// Whether a base parameter ("model.norm.weight") stays trainable: always without LoRA, else only when
// --lora-train-modules names its module.
bool trains_base_param(const LoraConfig& lora, const std::string& param_name);

// The adapters' parameter names: module + ".lora_A.weight" and ".lora_B.weight".
std::string lora_a_name(const std::string& module);
std::string lora_b_name(const std::string& module);
bool is_lora_a(const std::string& param_name);
bool is_lora_b(const std::string& param_name);

// Usage errors for a --lora-target or --lora-train-modules name that matches none of the model's layer
// linear modules (`linear_modules`, relative to a layer) or parameters (`param_names`).
void check_lora_names(const LoraConfig& lora, const std::vector<std::string>& linear_modules,
                      const std::vector<std::string>& param_names);

}  // namespace mt
