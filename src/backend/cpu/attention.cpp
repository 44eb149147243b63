// Causal self-attention, flash style: forward stores only out and one log-sum-exp per query; backward
// recomputes the probabilities from Q, K and that statistic. fp32 runs here one query row at a time; 16-bit
// storage runs as blocked matrix products in attention_16bit.cpp. Each (batch, head) is one task and runs
// its queries in order, so the sums into dK and dV never depend on the thread count.
#include "backend/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/attention_16bit.h"
#include "backend/cpu/isa_variant.h"
#include "backend/cpu/vec_math.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

// fp32 scratch per thread: a probability row and a score-gradient row.
int64_t f32_scratch_per_thread(int64_t T) {
  return 2 * T;
}

float dot(const float* a, const float* b, int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y += alpha * x
void axpy(float* y, float alpha, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// Writes the scaled scores of one query row against keys first..t (k_stride apart) into p; returns their max.
float scores(float* p, const float* q, const float* k, int64_t k_stride, int64_t first, int64_t t, int64_t hs,
             float scale) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t s = first; s <= t; ++s) {
    p[s] = scale * dot(q, k + s * k_stride, hs);
    max = std::max(max, p[s]);
  }
  return max;
}

void forward_f32(float* out, float* lse, const float* qkv, const int32_t* positions, int64_t B, int64_t T_len,
                 const QkvLayout& qkv_at, float* scratch) {
  const int64_t hs = qkv_at.hs, C = qkv_at.C, NH = qkv_at.NH, row = qkv_at.row();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      float* p = scratch + omp_get_thread_num() * f32_scratch_per_thread(T_len);
      const float* base = qkv + b * T_len * row;  // rows `row` apart
      const float *xq = base + qkv_at.q(h), *xk = base + qkv_at.k(h), *xv = base + qkv_at.v(h);
      for (int64_t t = 0; t < T_len; ++t) {
        const int64_t first = first_key(positions, b * T_len, t);
        const float max = scores(p, xq + t * row, xk, row, first, t, hs, scale);
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t s = first; s <= t; ++s) sum += p[s] = vexp(p[s] - max);
        float* o = out + (b * T_len + t) * C + h * hs;
        std::fill_n(o, hs, 0.0f);
        for (int64_t s = first; s <= t; ++s) axpy(o, p[s] / sum, xv + s * row, hs);
        lse[(b * NH + h) * T_len + t] = max + std::log(sum);
      }
    }
  }
}

// One task per (batch, key/value head): its query heads run in order, so dK and dV sum in a fixed order.
void backward_f32(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                  const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& qkv_at,
                  float* scratch) {
  const int64_t hs = qkv_at.hs, C = qkv_at.C, NH = qkv_at.NH, row = qkv_at.row(), group = NH / qkv_at.NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < qkv_at.NKV; ++g) {
      float* p = scratch + omp_get_thread_num() * f32_scratch_per_thread(T_len);
      float* ds = p + T_len;
      const float* base = qkv + b * T_len * row;
      float* dbase = dqkv + b * T_len * row;  // accumulated in place, rows `row` apart
      const int64_t h0 = g * group;
      const float *xk = base + qkv_at.k(h0), *xv = base + qkv_at.v(h0);
      float *gk = dbase + qkv_at.k(h0), *gv = dbase + qkv_at.v(h0);
      for (int64_t t = 0; t < T_len; ++t) {
        std::fill_n(gk + t * row, hs, 0.0f);
        std::fill_n(gv + t * row, hs, 0.0f);
        std::fill_n(dbase + t * row + qkv_at.q(h0), group * hs, 0.0f);
      }
      for (int64_t h = h0; h < h0 + group; ++h) {
        const float* xq = base + qkv_at.q(h);
        float* gq = dbase + qkv_at.q(h);
        for (int64_t t = 0; t < T_len; ++t) {
          const float* q = xq + t * row;
          const float* dy = dout + (b * T_len + t) * C + h * hs;
          const float* y = out + (b * T_len + t) * C + h * hs;
          const float row_lse = lse[(b * NH + h) * T_len + t];
          const int64_t first = first_key(positions, b * T_len, t);
          scores(p, q, xk, row, first, t, hs, scale);
          // dsoftmax: ds = p * (dp - sum_s p_s dp_s), and sum_s p_s dp_s = dot(dout_t, out_t).
          const float d = dot(dy, y, hs);
#pragma omp simd
          for (int64_t s = first; s <= t; ++s) p[s] = vexp(p[s] - row_lse);
          for (int64_t s = first; s <= t; ++s) ds[s] = scale * p[s] * (dot(dy, xv + s * row, hs) - d);
          float* dq = gq + t * row;
          for (int64_t s = first; s <= t; ++s) {
            axpy(dq, ds[s], xk + s * row, hs);
            axpy(gk + s * row, ds[s], q, hs);
            axpy(gv + s * row, p[s], dy, hs);
          }
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, const int32_t* positions, int64_t B, int64_t T_len,
                       int64_t C, int64_t NH, int64_t NKV, float* scratch) {
  const QkvLayout qkv_at(C, NH, NKV);
  if constexpr (std::is_same_v<T, float>) {
    forward_f32(out, lse, qkv, positions, B, T_len, qkv_at, scratch);
  } else {
    attention16_forward(out, lse, qkv, positions, B, T_len, qkv_at, scratch);
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                        const int32_t* positions, int64_t B, int64_t T_len, int64_t C, int64_t NH,
                        int64_t NKV, float* scratch) {
  const QkvLayout qkv_at(C, NH, NKV);
  if constexpr (std::is_same_v<T, float>) {
    backward_f32(dqkv, dout, qkv, out, lse, positions, B, T_len, qkv_at, scratch);
  } else {
    attention16_backward(dqkv, dout, qkv, out, lse, positions, B, T_len, qkv_at, scratch);
  }
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
int64_t attention_scratch_floats(int64_t T, int64_t head_size, int threads, DType dtype) {
  const int64_t per_thread = dtype == DType::f32 ? MT_ISA::f32_scratch_per_thread(T)
                                                 : attention16_scratch_per_thread(T, head_size, dtype);
  return per_thread * threads;
}

template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, const int32_t* positions, int64_t B, int64_t T_len,
                       int64_t C, int64_t NH, int64_t NKV, float* scratch) {
  dispatch<&attention_forward<T>>(out, lse, qkv, positions, B, T_len, C, NH, NKV, scratch);
}
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                        const int32_t* positions, int64_t B, int64_t T_len, int64_t C, int64_t NH,
                        int64_t NKV, float* scratch) {
  dispatch<&attention_backward<T>>(dqkv, dout, qkv, out, lse, positions, B, T_len, C, NH, NKV, scratch);
}

template void attention_forward<float>(float*, float*, const float*, const int32_t*, int64_t, int64_t,
                                       int64_t, int64_t, int64_t, float*);
template void attention_forward<bf16>(bf16*, float*, const bf16*, const int32_t*, int64_t, int64_t, int64_t,
                                      int64_t, int64_t, float*);
template void attention_forward<f16>(f16*, float*, const f16*, const int32_t*, int64_t, int64_t, int64_t,
                                     int64_t, int64_t, float*);
template void attention_backward<float>(float*, const float*, const float*, const float*, const float*,
                                        const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, float*);
template void attention_backward<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const float*,
                                       const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, float*);
template void attention_backward<f16>(f16*, const f16*, const f16*, const f16*, const float*, const int32_t*,
                                      int64_t, int64_t, int64_t, int64_t, int64_t, float*);
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
template <typename T>
bool enroll_type() {
  return enroll<&kernels::attention_forward<T>>(attention_forward) &&
         enroll<&kernels::attention_backward<T>>(attention_backward);
}
const bool enrolled = enroll_type<float>() && enroll_type<bf16>() && enroll_type<f16>();
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
