// AdamW exactly as torch.optim.AdamW (bias correction, eps outside the sqrt, decoupled weight decay),
// and the reductions gradient clipping needs.
#pragma once

#include <cstdint>

namespace mt::kernels {

struct AdamWStep {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // 0 for tensors without decay (biases, LayerNorm)
  int64_t step;        // 1-based, for the bias corrections
};

// param -= lr * weight_decay * param; m, v updated; param -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& s);

// Sum of squares in double, over fixed-size chunks summed in a fixed order: the same bits for any thread
// count.
double sum_of_squares(const float* x, int64_t n);

// x *= factor.
void scale(float* x, float factor, int64_t n);

}  // namespace mt::kernels
