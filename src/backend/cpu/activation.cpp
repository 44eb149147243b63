// GELU with the tanh approximation GPT-2 uses, SwiGLU, and their exact derivatives.
#include "backend/cpu/activation.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "backend/cpu/isa_variant.h"
#include "backend/cpu/typed_io.h"
#include "backend/cpu/vec_math.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

const float kGeluScale = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
constexpr float kGeluCubic = 0.044715f;

// Values per task, the size of the stack buffers that 16-bit values may go through.
constexpr int64_t kChunk = 1024;

// tanh of GELU's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline float gelu_tanh(float x) {
  return vtanh(kGeluScale * (x + kGeluCubic * x * x * x));
}

float sigmoid(float x) {
  return 1.0f / (1.0f + vexp(-x));
}

// Calls body(row, j0, n) for each chunk [j0, j0 + n) of the I columns of each of M rows, in parallel.
template <typename Body>
void parallel_over_row_chunks(int64_t M, int64_t I, const Body& body) {
  const int64_t chunks = (I + kChunk - 1) / kChunk;
#pragma omp parallel for
  for (int64_t c = 0; c < M * chunks; ++c) {
    const int64_t j0 = c % chunks * kChunk;
    body(c / chunks, j0, std::min(kChunk, I - j0));
  }
}

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  parallel_over_row_chunks(1, n, [&](int64_t, int64_t i0, int64_t m) {
    float x_buf[kChunk], y_buf[kChunk];
    const auto* x = read_row(inp + i0, m, x_buf);
    float* y = output_row(out + i0, y_buf);
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) {
      const float xi = widen(x[i]);
      y[i] = 0.5f * xi * (1.0f + gelu_tanh(xi));
    }
    store_row(out + i0, y, m);
  });
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  parallel_over_row_chunks(1, n, [&](int64_t, int64_t i0, int64_t m) {
    float x_buf[kChunk], dy_buf[kChunk], dx_buf[kChunk];
    const auto* x = read_row(inp + i0, m, x_buf);
    const auto* dy = read_row(dout + i0, m, dy_buf);
    float* dx = output_row(dinp + i0, dx_buf);
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) {
      const float xi = widen(x[i]), t = gelu_tanh(xi);
      const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * xi * xi);
      dx[i] = widen(dy[i]) * (0.5f * (1.0f + t) + 0.5f * xi * dt);
    }
    store_row(dinp + i0, dx, m);
  });
}

template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t M, int64_t I) {
  parallel_over_row_chunks(M, I, [&](int64_t r, int64_t j0, int64_t n) {
    float g_buf[kChunk], u_buf[kChunk], y_buf[kChunk];
    const T* row = inp + r * 2 * I + j0;
    const auto* g = read_row(row, n, g_buf);
    const auto* u = read_row(row + I, n, u_buf);
    float* y = output_row(out + r * I + j0, y_buf);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[j] = widen(g[j]) * sigmoid(widen(g[j])) * widen(u[j]);
    store_row(out + r * I + j0, y, n);
  });
}

template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t M, int64_t I) {
  parallel_over_row_chunks(M, I, [&](int64_t r, int64_t j0, int64_t n) {
    float g_buf[kChunk], u_buf[kChunk], dy_buf[kChunk], dg_buf[kChunk], du_buf[kChunk];
    const T* row = inp + r * 2 * I + j0;
    T* drow = dinp + r * 2 * I + j0;
    const auto* g = read_row(row, n, g_buf);
    const auto* u = read_row(row + I, n, u_buf);
    const auto* dy = read_row(dout + r * I + j0, n, dy_buf);
    float* dg = output_row(drow, dg_buf);
    float* du = output_row(drow + I, du_buf);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float x = widen(g[j]), s = sigmoid(x);
      du[j] = widen(dy[j]) * x * s;
      dg[j] = widen(dy[j]) * widen(u[j]) * s * (1.0f + x * (1.0f - s));
    }
    store_row(drow, dg, n);
    store_row(drow + I, du, n);
  });
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  dispatch<&gelu_forward<T>>(out, inp, n);
}
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  dispatch<&gelu_backward<T>>(dinp, inp, dout, n);
}
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t M, int64_t I) {
  dispatch<&swiglu_forward<T>>(out, inp, M, I);
}
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t M, int64_t I) {
  dispatch<&swiglu_backward<T>>(dinp, inp, dout, M, I);
}

template void swiglu_forward<float>(float*, const float*, int64_t, int64_t);
template void swiglu_forward<bf16>(bf16*, const bf16*, int64_t, int64_t);
template void swiglu_forward<f16>(f16*, const f16*, int64_t, int64_t);
template void swiglu_backward<float>(float*, const float*, const float*, int64_t, int64_t);
template void swiglu_backward<bf16>(bf16*, const bf16*, const bf16*, int64_t, int64_t);
template void swiglu_backward<f16>(f16*, const f16*, const f16*, int64_t, int64_t);
template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<bf16>(bf16*, const bf16*, int64_t);
template void gelu_forward<f16>(f16*, const f16*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<bf16>(bf16*, const bf16*, const bf16*, int64_t);
template void gelu_backward<f16>(f16*, const f16*, const f16*, int64_t);
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
template <typename T>
bool enroll_type() {
  return enroll<&kernels::gelu_forward<T>>(gelu_forward) &&
         enroll<&kernels::gelu_backward<T>>(gelu_backward) &&
         enroll<&kernels::swiglu_forward<T>>(swiglu_forward) &&
         enroll<&kernels::swiglu_backward<T>>(swiglu_backward);
}
const bool enrolled = enroll_type<float>() && enroll_type<bf16>() && enroll_type<f16>();
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
