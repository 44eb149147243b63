// Softmax + cross-entropy, one row at a time: the max keeps exp in range, the exponentials are written over
// the logits only when the gradient is wanted, and the padded columns and the masked rows take no part.
#include "backend/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/isa_variant.h"
#include "backend/cpu/vec_math.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

float row_max(const float* row, int64_t V) {
  float max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max)
  for (int64_t j = 0; j < V; ++j) max = std::max(max, row[j]);
  return max;
}

// The sum of exp(row - max); with compute_grad the exponentials are written over the row.
float exp_sum(float* row, int64_t V, float max, bool compute_grad) {
  // The simd reduction keeps one partial sum per lane: accurate enough in float for V = 50257.
  float sum = 0;
  if (compute_grad) {
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += row[j] = vexp(row[j] - max);
  } else {
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += vexp(row[j] - max);
  }
  return sum;
}

// The row's gradient from its exponentials: times `norm`, less grad_scale at the target column (when this
// row holds it, target >= 0), zero in the padded columns.
void finish_grad(float* row, int64_t V, int64_t Vp, float norm, int64_t target, float grad_scale) {
#pragma omp simd
  for (int64_t j = 0; j < V; ++j) row[j] *= norm;
  if (target >= 0) row[target] -= grad_scale;
  std::fill(row + V, row + Vp, 0.0f);
}

}  // namespace

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
    const float max = row_max(row, V);
    const float sum = exp_sum(row, V, max, compute_grad);
    losses[i] = std::log(sum) + max - target_logit;
    if (compute_grad) finish_grad(row, V, Vp, grad_scale / sum, target, grad_scale);
  }
}

void softmax_cross_entropy_split(float* logits, float* losses, const int32_t* targets,
                                 const uint8_t* loss_mask, int64_t N, int64_t V, int64_t Vp,
                                 bool compute_grad, float grad_scale, const VocabSplit& split) {
  const auto stat = [&](int rank, int which) { return split.stats + (rank * 3 + which) * N; };
  const auto counted = [&](int64_t i) { return !loss_mask || loss_mask[i]; };
  // Target column in this rank's logits, or -1.
  const auto local_target = [&](int64_t i) {
    const int64_t t = targets[i] - split.begin;
    return t >= 0 && t < V ? t : int64_t{-1};
  };
  float *max = stat(split.rank, 0), *sum = stat(split.rank, 1), *target_logit = stat(split.rank, 2);
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    float* row = logits + i * Vp;
    const int64_t t = local_target(i);
    target_logit[i] = t >= 0 ? row[t] : 0.0f;
    max[i] = counted(i) ? row_max(row, V) : 0.0f;
    sum[i] = counted(i) && V > 0 ? exp_sum(row, V, max[i], compute_grad) : 0.0f;
  }
  split.gather(split.stats, 3 * N);
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    float* row = logits + i * Vp;
    if (!counted(i)) {
      losses[i] = 0;
      if (compute_grad) std::fill(row, row + Vp, 0.0f);
      continue;
    }
    float whole_max = -std::numeric_limits<float>::infinity(), whole_sum = 0, whole_target = 0;
    for (int r = 0; r < split.ranks; ++r)
      if (stat(r, 1)[i] > 0) whole_max = std::max(whole_max, stat(r, 0)[i]);
    for (int r = 0; r < split.ranks; ++r) {
      if (stat(r, 1)[i] > 0) whole_sum += stat(r, 1)[i] * std::exp(stat(r, 0)[i] - whole_max);
      whole_target += stat(r, 2)[i];
    }
    losses[i] = std::log(whole_sum) + whole_max - whole_target;
    if (compute_grad) {
      const float own = sum[i] > 0 ? std::exp(max[i] - whole_max) : 0.0f;
      finish_grad(row, V, Vp, grad_scale * own / whole_sum, local_target(i), grad_scale);
    }
  }
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
void softmax_cross_entropy_split(float* logits, float* losses, const int32_t* targets,
                                 const uint8_t* loss_mask, int64_t N, int64_t V, int64_t Vp,
                                 bool compute_grad, float grad_scale, const VocabSplit& split) {
  dispatch<&softmax_cross_entropy_split>(logits, losses, targets, loss_mask, N, V, Vp, compute_grad,
                                         grad_scale, split);
}
void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, const uint8_t* loss_mask,
                           int64_t N, int64_t V, int64_t Vp, bool compute_grad, float grad_scale) {
  dispatch<&softmax_cross_entropy>(logits, losses, targets, loss_mask, N, V, Vp, compute_grad, grad_scale);
}
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
const bool enrolled = enroll<&kernels::softmax_cross_entropy>(softmax_cross_entropy) &&
                      enroll<&kernels::softmax_cross_entropy_split>(softmax_cross_entropy_split);
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
