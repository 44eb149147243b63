// Causal self-attention, flash style: forward stores only out and one log-sum-exp per query; backward
// recomputes each probability row from Q, K and that statistic. Each (batch, head) is one task in backward
// and runs its queries in order, so the sums into dK and dV never depend on the thread count.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/vec_math.h"

namespace mt::kernels {

namespace {

// Scratch per thread: forward keeps one score row, backward a probability row and a score-gradient row.
int64_t scratch_per_thread(int64_t T) {
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

// Writes the scaled scores of one query row against keys 0..t (k_stride apart) into p; returns their max.
float scores(float* p, const float* q, const float* k, int64_t k_stride, int64_t t, int64_t hs, float scale) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s <= t; ++s) {
    p[s] = scale * dot(q, k + s * k_stride, hs);
    max = std::max(max, p[s]);
  }
  return max;
}

}  // namespace

int64_t attention_scratch_floats(int64_t T, int64_t /*head_size*/, int threads, DType /*dtype*/) {
  return scratch_per_thread(T) * threads;
}

template <>
void attention_forward<float>(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                              int64_t NH, float* scratch) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(3)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        float* p = scratch + omp_get_thread_num() * scratch_per_thread(T);
        const float* base = qkv + b * T * C3 + h * hs;
        const float* q = base + t * C3;
        const float* k = base + C;
        const float* v = base + 2 * C;
        const float max = scores(p, q, k, C3, t, hs, scale);
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t s = 0; s <= t; ++s) sum += p[s] = vexp(p[s] - max);
        float* o = out + (b * T + t) * C + h * hs;
        std::fill_n(o, hs, 0.0f);
        for (int64_t s = 0; s <= t; ++s) axpy(o, p[s] / sum, v + s * C3, hs);
        lse[(b * NH + h) * T + t] = max + std::log(sum);
      }
    }
  }
}

template <>
void attention_backward<float>(float* dqkv, const float* dout, const float* qkv, const float* out,
                               const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH,
                               float* scratch) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      float* p = scratch + omp_get_thread_num() * scratch_per_thread(T);
      float* ds = p + T;
      const float* base = qkv + b * T * C3 + h * hs;
      const float* k = base + C;
      const float* v = base + 2 * C;
      float* dbase = dqkv + b * T * C3 + h * hs;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t part = 0; part < 3; ++part) std::fill_n(dbase + t * C3 + part * C, hs, 0.0f);
      }
      for (int64_t t = 0; t < T; ++t) {
        const float* q = base + t * C3;
        const float* dy = dout + (b * T + t) * C + h * hs;
        const float* y = out + (b * T + t) * C + h * hs;
        const float row_lse = lse[(b * NH + h) * T + t];
        scores(p, q, k, C3, t, hs, scale);
        // dsoftmax: ds = p * (dp - sum_s p_s dp_s), and sum_s p_s dp_s = dot(dout_t, out_t).
        const float d = dot(dy, y, hs);
#pragma omp simd
        for (int64_t s = 0; s <= t; ++s) p[s] = vexp(p[s] - row_lse);
        for (int64_t s = 0; s <= t; ++s) ds[s] = scale * p[s] * (dot(dy, v + s * C3, hs) - d);
        float* dq = dbase + t * C3;
        for (int64_t s = 0; s <= t; ++s) {
          axpy(dq, ds[s], k + s * C3, hs);
          axpy(dbase + s * C3 + C, ds[s], q, hs);
          axpy(dbase + s * C3 + 2 * C, p[s], dy, hs);
        }
      }
    }
  }
}

}  // namespace mt::kernels
