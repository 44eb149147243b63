#include "model/model_states.h"

#include <stdexcept>

#include "kernels/convert.h"

namespace mt {

void round_master_into_weights(const Allocation& memory) {
  const float* master = memory.master();
  if (!master) return;
  const int64_t n = memory.num_params();
  switch (memory.plan().policy.weights) {
    case DType::bf16:
      kernels::convert(static_cast<bf16*>(memory.params()), master, n);
      return;
    case DType::f16:
      kernels::convert(static_cast<f16*>(memory.params()), master, n);
      return;
    default:
      throw std::logic_error("master weights exist only for 16-bit weights");
  }
}

}  // namespace mt
