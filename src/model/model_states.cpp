#include "model/model_states.h"

#include <stdexcept>

#include "kernels/convert.h"

namespace mt {

void round_master_into_weights(const Allocation& memory) {
  const float* master = memory.master();
  if (!master) return;
  const Plan& plan = memory.plan();
  const int64_t n = plan.shard_end - plan.shard_begin;
  switch (plan.policy.weights) {
    case DType::bf16:
      kernels::convert(memory.weights_from<bf16>(plan.shard_begin), master, n);
      return;
    case DType::f16:
      kernels::convert(memory.weights_from<f16>(plan.shard_begin), master, n);
      return;
    default:
      throw std::logic_error("master weights exist only for 16-bit weights");
  }
}

}  // namespace mt
