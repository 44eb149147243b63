// Causal self-attention, flash style: forward stores only out and one log-sum-exp per query; backward
// recomputes each probability row from Q, K and that statistic. Each (batch, head) is one task and runs its
// queries in order, so the sums into dK and dV never depend on the thread count. 16-bit storage is upcast
// per (batch, head) into the thread's scratch, so both storage types share the fp32 arithmetic below.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/typed_io.h"
#include "kernels/vec_math.h"

namespace mt::kernels {

namespace {

// Scratch per thread: a probability row and a score-gradient row. 16-bit storage adds the (batch, head) in
// fp32: q, k and v upcast once rather than once per query, the dq, dk and dv accumulators (dk and dv collect
// a term from every query, which 16-bit sums would round away), and two rows of hs for dout/out rows.
int64_t scratch_per_thread(int64_t T, int64_t hs, DType dtype) {
  return dtype == DType::f32 ? 2 * T : 2 * T + 6 * T * hs + 2 * hs;
}

// The calling thread's part of the scratch; the fp32 head buffers are null for fp32 storage.
struct ThreadScratch {
  float* p;
  float* ds;
  float* head;  // 3*T*hs
  float* grad;  // 3*T*hs
  float* rows;  // 2*hs
};

ThreadScratch thread_scratch(float* scratch, int64_t T, int64_t hs, DType dtype) {
  float* p = scratch + omp_get_thread_num() * scratch_per_thread(T, hs, dtype);
  if (dtype == DType::f32) return {p, p + T, nullptr, nullptr, nullptr};
  float* head = p + 2 * T;
  return {p, p + T, head, head + 3 * T * hs, head + 6 * T * hs};
}

// One (batch, head) as fp32 rows: row t of q starts at q + t * stride, likewise k and v.
template <typename F>  // float or const float
struct HeadRows {
  F* q;
  F* k;
  F* v;
  int64_t stride;
};

// q, k and v of the head whose first element is `head` (a pointer into qkv): read in place for fp32, else
// upcast into buf.
template <typename T>
HeadRows<const float> load_head(const T* head, int64_t T_len, int64_t C, int64_t hs, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return {head, head + C, head + 2 * C, 3 * C};
  } else {
    for (int64_t part = 0; part < 3; ++part) {
      for (int64_t t = 0; t < T_len; ++t)
        widen_n(buf + (part * T_len + t) * hs, head + t * 3 * C + part * C, hs);
    }
    return {buf, buf + T_len * hs, buf + 2 * T_len * hs, hs};
  }
}

// Zeroed dq, dk and dv accumulators for the head at `head` in dqkv: dqkv itself for fp32, else buf.
template <typename T>
HeadRows<float> zeroed_grad(T* head, int64_t T_len, int64_t C, int64_t hs, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t t = 0; t < T_len; ++t) {
      for (int64_t part = 0; part < 3; ++part) std::fill_n(head + t * 3 * C + part * C, hs, 0.0f);
    }
    return {head, head + C, head + 2 * C, 3 * C};
  } else {
    std::fill_n(buf, 3 * T_len * hs, 0.0f);
    return {buf, buf + T_len * hs, buf + 2 * T_len * hs, hs};
  }
}

// Rounds 16-bit accumulators (from zeroed_grad) into dqkv; fp32 ones already are dqkv.
template <typename T>
void store_grad(T* head, const HeadRows<float>& grad, int64_t T_len, int64_t C, int64_t hs) {
  if constexpr (!std::is_same_v<T, float>) {
    for (int64_t part = 0; part < 3; ++part) {
      for (int64_t t = 0; t < T_len; ++t)
        narrow_n(head + t * 3 * C + part * C, grad.q + (part * T_len + t) * hs, hs);
    }
  }
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

int64_t attention_scratch_floats(int64_t T, int64_t head_size, int threads, DType dtype) {
  return scratch_per_thread(T, head_size, dtype) * threads;
}

template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, int64_t B, int64_t T_len, int64_t C, int64_t NH,
                       float* scratch) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const ThreadScratch ts = thread_scratch(scratch, T_len, hs, dtype_of<T>());
      float* p = ts.p;
      const HeadRows<const float> x = load_head(qkv + b * T_len * C3 + h * hs, T_len, C, hs, ts.head);
      for (int64_t t = 0; t < T_len; ++t) {
        const float max = scores(p, x.q + t * x.stride, x.k, x.stride, t, hs, scale);
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t s = 0; s <= t; ++s) sum += p[s] = vexp(p[s] - max);
        T* o_out = out + (b * T_len + t) * C + h * hs;
        float* o = output_row(o_out, ts.rows);
        std::fill_n(o, hs, 0.0f);
        for (int64_t s = 0; s <= t; ++s) axpy(o, p[s] / sum, x.v + s * x.stride, hs);
        store_row(o_out, o, hs);
        lse[(b * NH + h) * T_len + t] = max + std::log(sum);
      }
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int64_t B,
                        int64_t T_len, int64_t C, int64_t NH, float* scratch) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const ThreadScratch ts = thread_scratch(scratch, T_len, hs, dtype_of<T>());
      float *p = ts.p, *ds = ts.ds;
      const HeadRows<const float> x = load_head(qkv + b * T_len * C3 + h * hs, T_len, C, hs, ts.head);
      T* dhead = dqkv + b * T_len * C3 + h * hs;
      const HeadRows<float> g = zeroed_grad(dhead, T_len, C, hs, ts.grad);
      for (int64_t t = 0; t < T_len; ++t) {
        const float* q = x.q + t * x.stride;
        const float* dy = load_row(dout + (b * T_len + t) * C + h * hs, hs, ts.rows);
        const float* y = load_row(out + (b * T_len + t) * C + h * hs, hs, ts.rows + hs);
        const float row_lse = lse[(b * NH + h) * T_len + t];
        scores(p, q, x.k, x.stride, t, hs, scale);
        // dsoftmax: ds = p * (dp - sum_s p_s dp_s), and sum_s p_s dp_s = dot(dout_t, out_t).
        const float d = dot(dy, y, hs);
#pragma omp simd
        for (int64_t s = 0; s <= t; ++s) p[s] = vexp(p[s] - row_lse);
        for (int64_t s = 0; s <= t; ++s) ds[s] = scale * p[s] * (dot(dy, x.v + s * x.stride, hs) - d);
        float* dq = g.q + t * g.stride;
        for (int64_t s = 0; s <= t; ++s) {
          axpy(dq, ds[s], x.k + s * x.stride, hs);
          axpy(g.k + s * g.stride, ds[s], q, hs);
          axpy(g.v + s * g.stride, p[s], dy, hs);
        }
      }
      store_grad(dhead, g, T_len, C, hs);
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                       float*);
template void attention_forward<bf16>(bf16*, float*, const bf16*, int64_t, int64_t, int64_t, int64_t, float*);
template void attention_forward<f16>(f16*, float*, const f16*, int64_t, int64_t, int64_t, int64_t, float*);
template void attention_backward<float>(float*, const float*, const float*, const float*, const float*,
                                        int64_t, int64_t, int64_t, int64_t, float*);
template void attention_backward<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const float*, int64_t,
                                       int64_t, int64_t, int64_t, float*);
template void attention_backward<f16>(f16*, const f16*, const f16*, const f16*, const float*, int64_t,
                                      int64_t, int64_t, int64_t, float*);

}  // namespace mt::kernels
