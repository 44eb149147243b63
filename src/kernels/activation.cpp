// GELU with the tanh approximation GPT-2 uses, and its exact derivative.
#include "kernels/activation.h"

#include <cmath>
#include <numbers>

#include "kernels/vec_math.h"

namespace mt::kernels {

namespace {

const float kGeluScale = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
constexpr float kGeluCubic = 0.044715f;

}  // namespace

template <>
void gelu_forward<float>(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float t = vtanh(kGeluScale * (x + kGeluCubic * x * x * x));
    out[i] = 0.5f * x * (1.0f + t);
  }
}

template <>
void gelu_backward<float>(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float t = vtanh(kGeluScale * (x + kGeluCubic * x * x * x));
    const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * dt);
  }
}

}  // namespace mt::kernels
