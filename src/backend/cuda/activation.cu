// GELU and SwiGLU on the GPU, mirroring src/backend/cpu/activation.cpp: the same formulas, constants and
// evaluation order in fp32 (tanhf and expf where the CPU uses its polynomial vtanh and vexp, so the bits
// may differ in the last places). Each thread moves 16 bytes at a time where the tensor's rows allow it.
#include <algorithm>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/vec_io.cuh"

namespace mt::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // grid-stride beyond this

// sqrt(2 / pi) rounded to fp32: the CPU's static_cast<float>(std::sqrt(2.0 / std::numbers::pi)).
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__device__ inline float gelu_tanh(float x) {
  return tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
}

__device__ inline float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

__device__ inline float gelu(float x) {
  return 0.5f * x * (1.0f + gelu_tanh(x));
}

__device__ inline float gelu_grad(float x, float dy) {
  const float t = gelu_tanh(x);
  const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return dy * (0.5f * (1.0f + t) + 0.5f * x * dt);
}

// Whole 16-byte packs over a grid-stride loop; the first threads take the tail of n % kVec values.
template <typename T>
__global__ void __launch_bounds__(kThreads) gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  constexpr int kVec = kWide<T>;
  const int64_t packs = n / kVec, first = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  for (int64_t p = first; p < packs; p += int64_t{gridDim.x} * kThreads) {
    float x[kVec];
    load_f32<kVec>(x, inp + p * kVec);
#pragma unroll
    for (int k = 0; k < kVec; ++k) x[k] = gelu(x[k]);
    store_f32<kVec>(out + p * kVec, x);
  }
  const int64_t i = packs * kVec + first;
  if (i < n) out[i] = round_to<T>(gelu(to_f32(inp[i])));
}

// dinp and dout may be one buffer: each value is read before the same thread overwrites it.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  constexpr int kVec = kWide<T>;
  const int64_t packs = n / kVec, first = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  for (int64_t p = first; p < packs; p += int64_t{gridDim.x} * kThreads) {
    float x[kVec], dy[kVec];
    load_f32<kVec>(x, inp + p * kVec);
    load_f32<kVec>(dy, dout + p * kVec);
#pragma unroll
    for (int k = 0; k < kVec; ++k) x[k] = gelu_grad(x[k], dy[k]);
    store_f32<kVec>(dinp + p * kVec, x);
  }
  const int64_t i = packs * kVec + first;
  if (i < n) dinp[i] = round_to<T>(gelu_grad(to_f32(inp[i]), to_f32(dout[i])));
}

int64_t elementwise_blocks(int64_t n, int vec) {
  return std::clamp<int64_t>((n / vec + kThreads - 1) / kThreads, 1, kMaxBlocks);
}

// One block row per matrix row (blockIdx.x), kThreads packs of kVec columns per blockIdx.y.
template <int kVec, typename T>
__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(T* out, const T* inp, int64_t I) {
  const int64_t r = blockIdx.x, j = (blockIdx.y * int64_t{kThreads} + threadIdx.x) * kVec;
  if (j >= I) return;
  const T* row = inp + r * 2 * I + j;
  float g[kVec], u[kVec];
  load_f32<kVec>(g, row);
  load_f32<kVec>(u, row + I);
#pragma unroll
  for (int k = 0; k < kVec; ++k) g[k] = g[k] * sigmoid(g[k]) * u[k];
  store_f32<kVec>(out + r * I + j, g);
}

template <int kVec, typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t I) {
  const int64_t r = blockIdx.x, j = (blockIdx.y * int64_t{kThreads} + threadIdx.x) * kVec;
  if (j >= I) return;
  const T* row = inp + r * 2 * I + j;
  float g[kVec], u[kVec], dy[kVec], dg[kVec], du[kVec];
  load_f32<kVec>(g, row);
  load_f32<kVec>(u, row + I);
  load_f32<kVec>(dy, dout + r * I + j);
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float x = g[k], s = sigmoid(x);
    du[k] = dy[k] * x * s;
    dg[k] = dy[k] * u[k] * s * (1.0f + x * (1.0f - s));
  }
  store_f32<kVec>(dinp + r * 2 * I + j, dg);
  store_f32<kVec>(dinp + r * 2 * I + I + j, du);
}

// The grid of a row kernel: M rows by enough column tiles for I / kVec packs.
dim3 row_grid(int64_t M, int64_t I, int vec) {
  const int64_t tile = int64_t{kThreads} * vec;
  return dim3(static_cast<unsigned>(M), static_cast<unsigned>((I + tile - 1) / tile));
}

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_forward_kernel<<<elementwise_blocks(n, kWide<T>), kThreads, 0, stream>>>(out, inp, n);
  check_launch("gelu_forward");
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  gelu_backward_kernel<<<elementwise_blocks(n, kWide<T>), kThreads, 0, stream>>>(dinp, inp, dout, n);
  check_launch("gelu_backward");
}

// Rows of I values stay 16-byte aligned when I is a multiple of the pack; otherwise one value per thread.
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t M, int64_t I, cudaStream_t stream) {
  if (M <= 0 || I <= 0) return;
  constexpr int kVec = kWide<T>;
  if (I % kVec == 0)
    swiglu_forward_kernel<kVec><<<row_grid(M, I, kVec), kThreads, 0, stream>>>(out, inp, I);
  else
    swiglu_forward_kernel<1><<<row_grid(M, I, 1), kThreads, 0, stream>>>(out, inp, I);
  check_launch("swiglu_forward");
}

template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t M, int64_t I, cudaStream_t stream) {
  if (M <= 0 || I <= 0) return;
  constexpr int kVec = kWide<T>;
  if (I % kVec == 0)
    swiglu_backward_kernel<kVec><<<row_grid(M, I, kVec), kThreads, 0, stream>>>(dinp, inp, dout, I);
  else
    swiglu_backward_kernel<1><<<row_grid(M, I, 1), kThreads, 0, stream>>>(dinp, inp, dout, I);
  check_launch("swiglu_backward");
}

#define MT_ACTIVATION_INSTANTIATE(T)                                             \
  template void gelu_forward<T>(T*, const T*, int64_t, cudaStream_t);            \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t, cudaStream_t); \
  template void swiglu_forward<T>(T*, const T*, int64_t, int64_t, cudaStream_t); \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int64_t, cudaStream_t);
MT_ACTIVATION_INSTANTIATE(float)
MT_ACTIVATION_INSTANTIATE(bf16)
MT_ACTIVATION_INSTANTIATE(f16)
#undef MT_ACTIVATION_INSTANTIATE

}  // namespace mt::cuda
