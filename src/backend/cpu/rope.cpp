// Rotary embeddings: each (batch, position) row is one task; the angles are computed once per row for a
// block of frequencies and applied to every query and key head.
#include "backend/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/isa_variant.h"
#include "backend/cpu/typed_io.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

constexpr int64_t kFreqBlock = 256;  // frequencies per block: the stack buffers' size

// Turns the first `heads` heads of each row by +angle (sign 1) or -angle (sign -1).
template <typename T>
void rotate(T* x, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout, float theta,
            float sign) {
  const int64_t hs = layout.hs, half = hs / 2, heads = layout.NH + layout.NKV, row = layout.row();
#pragma omp parallel for
  for (int64_t bt = 0; bt < B * T_len; ++bt) {
    const float pos = static_cast<float>(positions ? positions[bt] : bt % T_len);
    T* r = x + bt * row;
    float cos_buf[kFreqBlock], sin_buf[kFreqBlock], a_buf[kFreqBlock], b_buf[kFreqBlock];
    float ya_buf[kFreqBlock], yb_buf[kFreqBlock];
    for (int64_t i0 = 0; i0 < half; i0 += kFreqBlock) {
      const int64_t n = std::min(kFreqBlock, half - i0);
      for (int64_t i = 0; i < n; ++i) {
        // fp32 frequencies and angles, as Hugging Face computes them.
        const float inv_freq =
            1.0f / std::pow(theta, static_cast<float>(2 * (i0 + i)) / static_cast<float>(hs));
        const float angle = pos * inv_freq;
        cos_buf[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sin_buf[i] = sign * static_cast<float>(std::sin(static_cast<double>(angle)));
      }
      for (int64_t h = 0; h < heads; ++h) {
        T* lo = r + h * hs + i0;
        T* hi = lo + half;
        const auto* a = read_row(lo, n, a_buf);
        const auto* b = read_row(hi, n, b_buf);
        float* ya = output_row(lo, ya_buf);
        float* yb = output_row(hi, yb_buf);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
          const float av = widen(a[i]), bv = widen(b[i]);
          ya[i] = av * cos_buf[i] - bv * sin_buf[i];
          yb[i] = bv * cos_buf[i] + av * sin_buf[i];
        }
        store_row(lo, ya, n);
        store_row(hi, yb, n);
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* qkv, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                  float theta) {
  rotate(qkv, positions, B, T_len, layout, theta, 1.0f);
}

template <typename T>
void rope_backward(T* dqkv, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                   float theta) {
  rotate(dqkv, positions, B, T_len, layout, theta, -1.0f);
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
template <typename T>
void rope_forward(T* qkv, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                  float theta) {
  dispatch<&rope_forward<T>>(qkv, positions, B, T_len, layout, theta);
}
template <typename T>
void rope_backward(T* dqkv, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                   float theta) {
  dispatch<&rope_backward<T>>(dqkv, positions, B, T_len, layout, theta);
}

template void rope_forward<float>(float*, const int32_t*, int64_t, int64_t, const QkvLayout&, float);
template void rope_forward<bf16>(bf16*, const int32_t*, int64_t, int64_t, const QkvLayout&, float);
template void rope_forward<f16>(f16*, const int32_t*, int64_t, int64_t, const QkvLayout&, float);
template void rope_backward<float>(float*, const int32_t*, int64_t, int64_t, const QkvLayout&, float);
template void rope_backward<bf16>(bf16*, const int32_t*, int64_t, int64_t, const QkvLayout&, float);
template void rope_backward<f16>(f16*, const int32_t*, int64_t, int64_t, const QkvLayout&, float);
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
template <typename T>
bool enroll_type() {
  return enroll<&kernels::rope_forward<T>>(rope_forward) && enroll<&kernels::rope_backward<T>>(rope_backward);
}
const bool enrolled = enroll_type<float>() && enroll_type<bf16>() && enroll_type<f16>();
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
