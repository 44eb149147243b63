// AdamW in torch.optim.AdamW's order of operations, and the reductions gradient-norm clipping needs.
#include "kernels/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mt::kernels {

namespace {

// sum_of_squares reduces chunks of this many elements, then adds the chunk sums in index order.
constexpr int64_t kSquaresChunk = 4096;

// torch's lerp: the form with the smaller weight keeps the rounding error small.
inline float lerp(float self, float end, float weight) {
  return weight < 0.5f ? self + weight * (end - self) : end - (end - self) * (1.0f - weight);
}

}  // namespace

template <>
void adamw_update<float, float, float>(float* master, float* param, const float* grad, float* m, float* v,
                                       int64_t n, const AdamWStep& s, const AdamWRounding& /*rounding*/) {
  if (master) param = master;
  // The scalars are Python floats (doubles) in torch, rounded to float where they meet a tensor.
  const double lr = s.lr, beta1 = s.beta1, beta2 = s.beta2;
  const float decay = static_cast<float>(1.0 - lr * s.weight_decay);
  const float m_weight = static_cast<float>(1.0 - beta1);
  const float v_keep = s.beta2, v_weight = static_cast<float>(1.0 - beta2);
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(s.step));
  const float neg_step_size = static_cast<float>(-(lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float eps = s.eps;
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * s.grad_multiplier;
    const float p = param[i] * decay;
    const float mi = lerp(m[i], g, m_weight);
    const float vi = v[i] * v_keep + v_weight * g * g;
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    param[i] = p + neg_step_size * (mi / denom);
  }
}

template <>
double sum_of_squares<float>(const float* x, int64_t n) {
  const int64_t chunks = (n + kSquaresChunk - 1) / kSquaresChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i0 = c * kSquaresChunk, i1 = std::min(n, i0 + kSquaresChunk);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = i0; i < i1; ++i) sum += static_cast<double>(x[i]) * x[i];
    partial[c] = sum;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace mt::kernels
