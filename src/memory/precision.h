// The run's precision policy (--precision, the moments' and main gradients' dtypes, master weights) and what
// it means for memory: the dtype kernels compute in and how model states are stored. Both the trainer and the
// estimator derive the Plan's ModelStatePolicy from here, so bytes per parameter have one definition.
#pragma once

#include <string>

#include "core/dtype.h"
#include "core/names.h"
#include "memory/plan.h"

namespace mt {

// How weights and activations are stored (--precision, --bf16, --fp16); the math is fp32 in every one.
enum class Precision { fp32, bf16, fp16 };
inline constexpr auto kPrecisionNames = names_in_order<Precision>("fp32", "bf16", "fp16");

// How an Adam moment is stored (Megatron's --exp-avg-dtype, --exp-avg-sq-dtype): fp8 and int8 are 8-bit
// block-quantized (backend/cpu/block_quant.h).
enum class MomentDType { fp32, bf16, fp8, int8 };
inline constexpr auto kMomentDTypeNames = names_in_order<MomentDType>("fp32", "bf16", "fp8", "int8");

// Megatron's --main-grads-dtype (true: gradients in bf16) and --main-params-dtype (true: fp32 master
// weights).
inline constexpr auto kMainGradsDTypeNames = name_table(std::pair{false, "fp32"}, std::pair{true, "bf16"});
inline constexpr auto kMainParamsDTypeNames = name_table(std::pair{true, "fp32"}, std::pair{false, "none"});

struct PrecisionConfig {
  Precision precision = Precision::fp32;
  // Both moments are stored in one dtype (check_precision); --o2-optimizer is bf16.
  MomentDType exp_avg = MomentDType::fp32, exp_avg_sq = MomentDType::fp32;
  bool o2_gradient = false;    // gradients accumulated and stored in bf16 (--main-grads-dtype bf16)
  bool master_weights = true;  // fp32 copy of 16-bit weights (--main-params-dtype none: bf16 weights,
                               // stochastic rounding)
  bool o2_stochastic_rounding = false;  // bf16 moments rounded stochastically instead of to nearest

  MomentDType moments() const { return exp_avg; }
  void set_moments(MomentDType d) { exp_avg = exp_avg_sq = d; }
};

// "fp32", "bf16" or "fp16"; anything else is a usage error naming --precision.
Precision parse_precision(const std::string& name);
std::string precision_name(Precision p);
std::string moment_dtype_name(MomentDType d);

// Usage errors for combinations that do not exist (O2 or no master weights without bf16, ...).
void check_precision(const PrecisionConfig& config);

// The storage type of weights and activations.
DType compute_dtype(Precision p);

// Bytes per parameter: fp32 16; bf16/fp16 18; bf16 + O2 optimizer 14; + O2 gradient 16; both 12; both
// without master weights 8. 8-bit moments: 1 byte each, plus an fp32 scale per block of each.
ModelStatePolicy model_state_policy(const PrecisionConfig& config);

// "weights BF16 + F32 master, grads F32, moments U8 + an F32 scale per 2048", for banners and messages.
std::string model_states_text(const ModelStatePolicy& policy);

}  // namespace mt
