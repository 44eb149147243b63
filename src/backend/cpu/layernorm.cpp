// LayerNorm and RMSNorm: rows are independent in forward; backward computes the input gradient row by row and
// the parameter gradients column block by column block, so their sums run over rows in a fixed order. Every
// storage type loads into fp32 and rounds once per stored value.
#include "backend/cpu/layernorm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cpu/column_blocks.h"
#include "backend/cpu/isa_variant.h"
#include "backend/cpu/typed_io.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

// Rows are processed in chunks of columns: fp32 rows in one chunk (so their sums keep the order of a single
// vector loop), 16-bit rows kChunk values at a time, the size of the stack buffers they may go through.
constexpr int64_t kChunk = 1024;

template <typename T>
int64_t chunk_columns(int64_t C) {
  return std::is_same_v<T, float> ? C : kChunk;
}

// LayerNorm when kCentered, else RMSNorm: the same normalisation without the mean (taken as 0) or a bias.
template <bool kCentered, typename T>
void norm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias, int64_t N,
                  int64_t C, float eps) {
  const int64_t chunk = chunk_columns<T>(C);
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    const T* x = inp + i * C;
    T* y = out + i * C;
    float x_buf[kChunk], w_buf[kChunk], b_buf[kChunk], y_buf[kChunk];
    float sum = 0;
    for (int64_t j0 = 0; kCentered && j0 < C; j0 += chunk) {
      const int64_t n = std::min(chunk, C - j0);
      const auto* xc = read_row(x + j0, n, x_buf);
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < n; ++j) sum += widen(xc[j]);
    }
    const float m = sum / C;  // 0 for RMSNorm
    // Two passes: the variance of centered values does not cancel when the mean is large.
    float sq = 0;
    for (int64_t j0 = 0; j0 < C; j0 += chunk) {
      const int64_t n = std::min(chunk, C - j0);
      const auto* xc = read_row(x + j0, n, x_buf);
#pragma omp simd reduction(+ : sq)
      for (int64_t j = 0; j < n; ++j) sq += (widen(xc[j]) - m) * (widen(xc[j]) - m);
    }
    const float s = 1.0f / std::sqrt(sq / C + eps);
    for (int64_t j0 = 0; j0 < C; j0 += chunk) {
      const int64_t n = std::min(chunk, C - j0);
      const auto* xc = read_row(x + j0, n, x_buf);
      const auto* wc = read_row(weight + j0, n, w_buf);
      float* yc = output_row(y + j0, y_buf);
      if constexpr (kCentered) {
        const auto* bc = read_row(bias + j0, n, b_buf);
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) yc[j] = (widen(xc[j]) - m) * s * widen(wc[j]) + widen(bc[j]);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) yc[j] = widen(xc[j]) * s * widen(wc[j]);
      }
      store_row(y + j0, yc, n);
    }
    if (kCentered) mean[i] = m;
    rstd[i] = s;
  }
}

template <bool kCentered, typename T, typename G>
void norm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                   const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int64_t chunk = chunk_columns<T>(C);
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    const T* x = inp + i * C;
    const T* dy = dout + i * C;
    T* dx = dinp + i * C;
    const float m = kCentered ? mean[i] : 0.0f, s = rstd[i];
    float x_buf[kChunk], dy_buf[kChunk], w_buf[kChunk], dx_buf[kChunk];
    // dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), with dnorm = dy * weight; RMSNorm has no
    // mean(dnorm) term.
    float dnorm_sum = 0, dnorm_norm_sum = 0;
    for (int64_t j0 = 0; j0 < C; j0 += chunk) {
      const int64_t n = std::min(chunk, C - j0);
      const auto* xc = read_row(x + j0, n, x_buf);
      const auto* dyc = read_row(dy + j0, n, dy_buf);
      const auto* wc = read_row(weight + j0, n, w_buf);
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
      for (int64_t j = 0; j < n; ++j) {
        const float dnorm = widen(dyc[j]) * widen(wc[j]);
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * (widen(xc[j]) - m) * s;
      }
    }
    const float dnorm_mean = kCentered ? dnorm_sum / C : 0.0f, dnorm_norm_mean = dnorm_norm_sum / C;
    for (int64_t j0 = 0; j0 < C; j0 += chunk) {
      const int64_t n = std::min(chunk, C - j0);
      const auto* xc = read_row(x + j0, n, x_buf);
      const auto* dyc = read_row(dy + j0, n, dy_buf);
      const auto* wc = read_row(weight + j0, n, w_buf);
      const auto* dx_old = read_row(dx + j0, n, dx_buf);
      float* dxc = output_row(dx + j0, dx_buf);
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        const float norm = (widen(xc[j]) - m) * s;
        dxc[j] = widen(dx_old[j]) + s * (widen(dyc[j]) * widen(wc[j]) - dnorm_mean - norm * dnorm_norm_mean);
      }
      store_row(dx + j0, dxc, n);
    }
  }
  if (!dweight) return;  // a frozen norm (LoRA): only the input gradient
  parallel_over_column_blocks(C, [&](int64_t j0, int64_t j1) {
    const int64_t n = j1 - j0;
    float dw[kColumnBlock] = {}, db[kColumnBlock] = {}, x_buf[kColumnBlock], dy_buf[kColumnBlock];
    for (int64_t i = 0; i < N; ++i) {
      const auto* x = read_row(inp + i * C + j0, n, x_buf);
      const auto* dy = read_row(dout + i * C + j0, n, dy_buf);
      const float m = kCentered ? mean[i] : 0.0f, s = rstd[i];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        dw[j] += widen(dy[j]) * (widen(x[j]) - m) * s;
        db[j] += widen(dy[j]);
      }
    }
    // One rounding per call: a 16-bit gradient would lose most row contributions if rounded per row.
    for (int64_t j = 0; j < n; ++j) {
      dweight[j0 + j] = narrow<G>(widen(dweight[j0 + j]) + dw[j]);
      if (kCentered) dbias[j0 + j] = narrow<G>(widen(dbias[j0 + j]) + db[j]);
    }
  });
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C, float eps) {
  norm_forward<true>(out, mean, rstd, inp, weight, bias, N, C, eps);
}

template <typename T, typename G>
void layernorm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C) {
  norm_backward<true>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C, float eps) {
  norm_forward<false>(out, nullptr, rstd, inp, weight, static_cast<const T*>(nullptr), N, C, eps);
}

template <typename T, typename G>
void rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* weight, const float* rstd,
                      int64_t N, int64_t C) {
  norm_backward<false>(dinp, dweight, static_cast<G*>(nullptr), dout, inp, weight, nullptr, rstd, N, C);
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C, float eps) {
  dispatch<&layernorm_forward<T>>(out, mean, rstd, inp, weight, bias, N, C, eps);
}
template <typename T, typename G>
void layernorm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C) {
  dispatch<&layernorm_backward<T, G>>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C, float eps) {
  dispatch<&rmsnorm_forward<T>>(out, rstd, inp, weight, N, C, eps);
}
template <typename T, typename G>
void rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* weight, const float* rstd,
                      int64_t N, int64_t C) {
  dispatch<&rmsnorm_backward<T, G>>(dinp, dweight, dout, inp, weight, rstd, N, C);
}

template void rmsnorm_backward<float, float>(float*, float*, const float*, const float*, const float*,
                                             const float*, int64_t, int64_t);
template void rmsnorm_backward<bf16, float>(bf16*, float*, const bf16*, const bf16*, const bf16*,
                                            const float*, int64_t, int64_t);
template void rmsnorm_backward<bf16, bf16>(bf16*, bf16*, const bf16*, const bf16*, const bf16*, const float*,
                                           int64_t, int64_t);
template void rmsnorm_backward<f16, float>(f16*, float*, const f16*, const f16*, const f16*, const float*,
                                           int64_t, int64_t);
template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t, float);
template void rmsnorm_forward<bf16>(bf16*, float*, const bf16*, const bf16*, int64_t, int64_t, float);
template void rmsnorm_forward<f16>(f16*, float*, const f16*, const f16*, int64_t, int64_t, float);
template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*,
                                       int64_t, int64_t, float);
template void layernorm_forward<bf16>(bf16*, float*, float*, const bf16*, const bf16*, const bf16*, int64_t,
                                      int64_t, float);
template void layernorm_forward<f16>(f16*, float*, float*, const f16*, const f16*, const f16*, int64_t,
                                     int64_t, float);
template void layernorm_backward<float, float>(float*, float*, float*, const float*, const float*,
                                               const float*, const float*, const float*, int64_t, int64_t);
template void layernorm_backward<bf16, float>(bf16*, float*, float*, const bf16*, const bf16*, const bf16*,
                                              const float*, const float*, int64_t, int64_t);
template void layernorm_backward<bf16, bf16>(bf16*, bf16*, bf16*, const bf16*, const bf16*, const bf16*,
                                             const float*, const float*, int64_t, int64_t);
template void layernorm_backward<f16, float>(f16*, float*, float*, const f16*, const f16*, const f16*,
                                             const float*, const float*, int64_t, int64_t);
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
// Activations of type T with gradients of type G.
template <typename T, typename G>
bool enroll_types() {
  return enroll<&kernels::layernorm_backward<T, G>>(layernorm_backward) &&
         enroll<&kernels::rmsnorm_backward<T, G>>(rmsnorm_backward);
}
template <typename T>
bool enroll_forward() {
  return enroll<&kernels::layernorm_forward<T>>(layernorm_forward) &&
         enroll<&kernels::rmsnorm_forward<T>>(rmsnorm_forward);
}
const bool enrolled = enroll_forward<float>() && enroll_forward<bf16>() && enroll_forward<f16>() &&
                      enroll_types<float, float>() && enroll_types<bf16, float>() &&
                      enroll_types<bf16, bf16>() && enroll_types<f16, float>();
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
