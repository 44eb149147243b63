// GELU with the tanh approximation GPT-2 uses, and its exact derivative.
#include "kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/typed_io.h"
#include "kernels/vec_math.h"

namespace mt::kernels {

namespace {

const float kGeluScale = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
constexpr float kGeluCubic = 0.044715f;

// Values per task, the size of the stack buffers that 16-bit values may go through.
constexpr int64_t kChunk = 1024;

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    float x_buf[kChunk], y_buf[kChunk];
    const auto* x = read_row(inp + i0, m, x_buf);
    float* y = output_row(out + i0, y_buf);
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) {
      const float xi = widen(x[i]);
      const float t = vtanh(kGeluScale * (xi + kGeluCubic * xi * xi * xi));
      y[i] = 0.5f * xi * (1.0f + t);
    }
    store_row(out + i0, y, m);
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
#pragma omp parallel for
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    float x_buf[kChunk], dy_buf[kChunk], dx_buf[kChunk];
    const auto* x = read_row(inp + i0, m, x_buf);
    const auto* dy = read_row(dout + i0, m, dy_buf);
    float* dx = output_row(dinp + i0, dx_buf);
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) {
      const float xi = widen(x[i]);
      const float t = vtanh(kGeluScale * (xi + kGeluCubic * xi * xi * xi));
      const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * xi * xi);
      dx[i] = widen(dy[i]) * (0.5f * (1.0f + t) + 0.5f * xi * dt);
    }
    store_row(dinp + i0, dx, m);
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<bf16>(bf16*, const bf16*, int64_t);
template void gelu_forward<f16>(f16*, const f16*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<bf16>(bf16*, const bf16*, const bf16*, int64_t);
template void gelu_backward<f16>(f16*, const f16*, const f16*, int64_t);

}  // namespace mt::kernels
