#include "memory/precision.h"

#include "core/error.h"
#include "core/moment_format.h"

namespace mt {

Precision parse_precision(const std::string& name) {
  return kPrecisionNames.parse_or_fail("--precision", name);
}

std::string precision_name(Precision p) {
  return std::string(kPrecisionNames.name(p));
}

std::string moment_dtype_name(MomentDType d) {
  return std::string(kMomentDTypeNames.name(d));
}

void check_precision(const PrecisionConfig& c) {
  const bool bf16 = c.precision == Precision::bf16;
  if (c.exp_avg != c.exp_avg_sq)
    fail_usage("--exp-avg-dtype " + moment_dtype_name(c.exp_avg) + " with --exp-avg-sq-dtype " +
               moment_dtype_name(c.exp_avg_sq) +
               ": both moments are stored in one dtype; give both the same");
  if (c.exp_avg == MomentDType::bf16 && !bf16)
    fail_usage(
        "--exp-avg-dtype bf16 (--o2-optimizer) needs --bf16; fp8 and int8 moments work with any precision");
  if (c.o2_gradient && !bf16) fail_usage("--main-grads-dtype bf16 (--o2-gradient) needs --bf16");
  if (!c.master_weights && !bf16)
    fail_usage(
        "--main-params-dtype none (--no-master-weights) needs --bf16 (bf16 weights are updated with "
        "stochastic rounding)");
  if (c.o2_stochastic_rounding && c.exp_avg != MomentDType::bf16)
    fail_usage(
        "--o2-stochastic-rounding needs bf16 moments (--o2-optimizer): it rounds the bf16 Adam moments");
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

std::string model_states_text(const ModelStatePolicy& p) {
  std::string text = "weights " + std::string(dtype_name(p.weights)) +
                     (p.master_weights ? " + F32 master" : "") + ", grads " +
                     std::string(dtype_name(p.grads)) + ", moments " + std::string(dtype_name(p.moments));
  if (p.blocked_moments()) text += " + an F32 scale per " + std::to_string(p.moment_block);
  if (p.v_blocks > 0)
    text += " (m; Adam-mini's v one F32 per block, " + std::to_string(p.v_blocks) + " blocks)";
  return text;
}

ModelStatePolicy model_state_policy(const PrecisionConfig& c) {
  const DType weights = compute_dtype(c.precision);
  ModelStatePolicy policy{.weights = weights,
                          .grads = c.o2_gradient ? DType::bf16 : DType::f32,
                          .master_weights = weights != DType::f32 && c.master_weights};
  switch (c.exp_avg) {
    case MomentDType::fp32:
      break;
    case MomentDType::bf16:
      policy.moments = DType::bf16;
      break;
    case MomentDType::fp8:
      policy.moments = DType::f8_e4m3;
      policy.moment_block = moment_block_size(MomentFormat::fp8);
      break;
    case MomentDType::int8:
      policy.moments = DType::u8;
      policy.moment_block = moment_block_size(MomentFormat::int8);
      break;
  }
  return policy;
}

}  // namespace mt
