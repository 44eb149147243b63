// Softmax + cross-entropy, one row at a time: the max keeps exp in range, the exponentials are written over
// the logits only when the gradient is wanted, and the padded columns and the masked rows take no part.
#include "backend/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/isa_variant.h"
#include "backend/cpu/vec_math.h"

namespace mt::kernels {

namespace MT_ISA {

void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, const uint8_t* loss_mask,
                           int64_t N, int64_t V, int64_t Vp, bool compute_grad, float grad_scale) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    float* row = logits + i * Vp;
    if (loss_mask && !loss_mask[i]) {
      losses[i] = 0;
      if (compute_grad) std::fill(row, row + Vp, 0.0f);
      continue;
    }
    const int32_t target = targets[i];
    const float target_logit = row[target];  // read before the gradient overwrites the row
    float max = row[0];
#pragma omp simd reduction(max : max)
    for (int64_t j = 0; j < V; ++j) max = std::max(max, row[j]);
    // The simd reduction keeps one partial sum per lane: accurate enough in float for V = 50257.
    float sum = 0;
    if (compute_grad) {
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < V; ++j) sum += row[j] = vexp(row[j] - max);
    } else {
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < V; ++j) sum += vexp(row[j] - max);
    }
    losses[i] = std::log(sum) + max - target_logit;
    if (compute_grad) {
      const float norm = grad_scale / sum;
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) row[j] *= norm;
      row[target] -= grad_scale;
      std::fill(row + V, row + Vp, 0.0f);
    }
  }
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, const uint8_t* loss_mask,
                           int64_t N, int64_t V, int64_t Vp, bool compute_grad, float grad_scale) {
  dispatch<&softmax_cross_entropy>(logits, losses, targets, loss_mask, N, V, Vp, compute_grad, grad_scale);
}
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
const bool enrolled = enroll<&kernels::softmax_cross_entropy>(softmax_cross_entropy);
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
