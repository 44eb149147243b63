// The run's precision policy (--precision, O2 flags, master weights) and what it means for memory: the dtype
// kernels compute in and how model states are stored. Both the trainer and the estimator derive the Plan's
// ModelStatePolicy from here, so bytes per parameter have one definition.
#pragma once

#include <string>

#include "core/dtype.h"
#include "core/names.h"
#include "memory/plan.h"

namespace mt {

enum class Precision { fp32, bf16, fp16 };
inline constexpr auto kPrecisionNames =
    name_table(std::pair{Precision::fp32, "fp32"}, std::pair{Precision::bf16, "bf16"},
               std::pair{Precision::fp16, "fp16"});

struct PrecisionConfig {
  Precision precision = Precision::fp32;
  bool o2_optimizer = false;   // Adam moments stored in bf16
  bool o2_gradient = false;    // gradients accumulated and stored in bf16
  bool master_weights = true;  // fp32 copy of 16-bit weights (false: bf16 weights, stochastic rounding)
  bool o2_stochastic_rounding = false;  // bf16 moments rounded stochastically instead of to nearest
};

// "fp32", "bf16" or "fp16"; anything else is a usage error naming --precision.
Precision parse_precision(const std::string& name);
std::string precision_name(Precision p);

// Usage errors for combinations that do not exist (O2 or no master weights without bf16, ...).
void check_precision(const PrecisionConfig& config);

// The storage type of weights and activations.
DType compute_dtype(Precision p);

// Bytes per parameter: fp32 16; bf16/fp16 18; bf16 + O2 optimizer 14; + O2 gradient 16; both 12; both
// without master weights 8.
ModelStatePolicy model_state_policy(const PrecisionConfig& config);

}  // namespace mt
