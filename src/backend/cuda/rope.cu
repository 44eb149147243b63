// Rotary embeddings on the GPU, mirroring src/backend/cpu/rope.cpp: one block per (batch, position) row
// computes the row's cos and sin once per frequency, the way the CPU does (the fp32 frequency from a pow,
// the fp32 angle, its cos and sin in double rounded to fp32), then turns every query and key head.
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/vec_io.cuh"

namespace mt::cuda {

namespace {

constexpr int kThreads = 256;

// Turns the first `heads` heads of row blockIdx.x of x by +angle (sign 1) or -angle (sign -1). With kVec > 1,
// hs / 2 and the row width are multiples of kVec. Each value is read and written by the same thread.
template <int kVec, typename T>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(T* x, const int32_t* __restrict__ positions, int64_t T_len, int64_t row, int64_t hs,
                int64_t heads, float theta, float sign) {
  extern __shared__ float trig[];  // cos of each frequency, then sin (times sign)
  const int64_t bt = blockIdx.x, half = hs / 2;
  float* cos_of = trig;
  float* sin_of = trig + half;
  const float pos = static_cast<float>(positions ? positions[bt] : bt % T_len);
  for (int64_t i = threadIdx.x; i < half; i += kThreads) {
    // The CPU's fp32 std::pow (glibc powf, correctly rounded in practice): pow in double, rounded once.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(hs);
    const float inv_freq =
        1.0f / static_cast<float>(pow(static_cast<double>(theta), static_cast<double>(exponent)));
    const float angle = pos * inv_freq;
    cos_of[i] = static_cast<float>(cos(static_cast<double>(angle)));
    sin_of[i] = sign * static_cast<float>(sin(static_cast<double>(angle)));
  }
  __syncthreads();
  T* r = x + bt * row;
  const int64_t packs_per_head = half / kVec;
  for (int64_t p = threadIdx.x; p < heads * packs_per_head; p += kThreads) {
    const int64_t h = p / packs_per_head, i = p % packs_per_head * kVec;
    T* lo = r + h * hs + i;
    T* hi = lo + half;
    float a[kVec], b[kVec], ya[kVec], yb[kVec];
    load_f32<kVec>(a, lo);
    load_f32<kVec>(b, hi);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float c = cos_of[i + k], s = sin_of[i + k];
      ya[k] = a[k] * c - b[k] * s;
      yb[k] = b[k] * c + a[k] * s;
    }
    store_f32<kVec>(lo, ya);
    store_f32<kVec>(hi, yb);
  }
}

template <typename T>
void launch_rope(T* x, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                 float theta, float sign, cudaStream_t stream, const char* name) {
  const int64_t rows = B * T_len, half = layout.hs / 2, heads = layout.NH + layout.NKV, row = layout.row();
  if (rows <= 0 || half <= 0 || heads <= 0) return;
  const size_t shared = 2 * static_cast<size_t>(half) * sizeof(float);
  // 16-byte packs when both halves of every head and every row start on 16 bytes.
  if (half % kWide<T> == 0 && row % kWide<T> == 0)
    rope_kernel<kWide<T>><<<static_cast<unsigned>(rows), kThreads, shared, stream>>>(
        x, positions, T_len, row, layout.hs, heads, theta, sign);
  else
    rope_kernel<1><<<static_cast<unsigned>(rows), kThreads, shared, stream>>>(x, positions, T_len, row,
                                                                              layout.hs, heads, theta, sign);
  check_launch(name);
}

}  // namespace

template <typename T>
void rope_forward(T* qkv, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                  float theta, cudaStream_t stream) {
  launch_rope(qkv, positions, B, T_len, layout, theta, 1.0f, stream, "rope_forward");
}

template <typename T>
void rope_backward(T* dqkv, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                   float theta, cudaStream_t stream) {
  launch_rope(dqkv, positions, B, T_len, layout, theta, -1.0f, stream, "rope_backward");
}

#define MT_ROPE_INSTANTIATE(T)                                                                 \
  template void rope_forward<T>(T*, const int32_t*, int64_t, int64_t, const QkvLayout&, float, \
                                cudaStream_t);                                                 \
  template void rope_backward<T>(T*, const int32_t*, int64_t, int64_t, const QkvLayout&, float, cudaStream_t);
MT_ROPE_INSTANTIATE(float)
MT_ROPE_INSTANTIATE(bf16)
MT_ROPE_INSTANTIATE(f16)
#undef MT_ROPE_INSTANTIATE

}  // namespace mt::cuda
