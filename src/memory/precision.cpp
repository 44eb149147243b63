#include "memory/precision.h"

#include "core/error.h"

namespace mt {

Precision parse_precision(const std::string& name) {
  return kPrecisionNames.parse_or_fail("--precision", name);
}

std::string precision_name(Precision p) {
  return std::string(kPrecisionNames.name(p));
}

void check_precision(const PrecisionConfig& c) {
  const bool bf16 = c.precision == Precision::bf16;
  if (c.o2_optimizer && !bf16) fail_usage("--o2-optimizer needs --bf16 (Adam moments are stored in bf16)");
  if (c.o2_gradient && !bf16) fail_usage("--o2-gradient needs --bf16 (gradients are stored in bf16)");
  if (!c.master_weights && !bf16)
    fail_usage("--no-master-weights needs --bf16 (bf16 weights are updated with stochastic rounding)");
  if (c.o2_stochastic_rounding && !c.o2_optimizer)
    fail_usage("--o2-stochastic-rounding needs --o2-optimizer (it rounds the bf16 Adam moments)");
}

DType compute_dtype(Precision p) {
  switch (p) {
    case Precision::fp32:
      return DType::f32;
    case Precision::bf16:
      return DType::bf16;
    case Precision::fp16:
      return DType::f16;
  }
  return DType::f32;
}

ModelStatePolicy model_state_policy(const PrecisionConfig& c) {
  const DType weights = compute_dtype(c.precision);
  return {.weights = weights,
          .grads = c.o2_gradient ? DType::bf16 : DType::f32,
          .moments = c.o2_optimizer ? DType::bf16 : DType::f32,
          .master_weights = weights != DType::f32 && c.master_weights};
}

}  // namespace mt
