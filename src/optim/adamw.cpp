#include "optim/adamw.h"

#include <cmath>

#include "kernels/adamw.h"

namespace mt {

double AdamW::step(const TensorTable& table, Allocation& memory, float lr, int64_t step) {
  const int64_t n = memory.num_params();
  // One fixed-order reduction over the contiguous gradient buffer: the same norm for any thread count.
  const double norm = std::sqrt(kernels::sum_of_squares(memory.grads(), n));
  float multiplier = 1.0f;
  if (config_.clip_grad > 0) {
    // As torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
    const double coef = static_cast<double>(config_.clip_grad) / (norm + 1e-6);
    if (coef < 1.0) multiplier = static_cast<float>(coef);
  }
  for (const ParamGroup& p : params_) {
    const int64_t offset = memory.grad(p.id) - memory.grads();
    const kernels::AdamWStep s{
        lr,   config_.beta1, config_.beta2, config_.eps, p.decay ? config_.weight_decay : 0.0f,
        step, multiplier};
    kernels::adamw_update<float, float, float>(nullptr, memory.f32(p.id), memory.grad(p.id),
                                               memory.adam_m() + offset, memory.adam_v() + offset,
                                               table[p.id].numel(), s, {});
  }
  return norm;
}

}  // namespace mt
