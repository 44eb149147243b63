// LayerNorm and RMSNorm on the GPU, mirroring src/backend/cpu/layernorm.cpp: the same formulas and eps
// placement in fp32. Forward and the input gradient give each row to one warp (lane-strided sums, then a
// butterfly of shuffles: a fixed order); the parameter gradients are a second kernel in which each column's
// rows are split over a fixed set of threads and their partial sums added in a fixed order, so two runs
// give the same bits without atomics or scratch memory.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/layernorm.cuh"
#include "backend/cuda/vec_io.cuh"

namespace mt::cuda {

namespace {

constexpr int kRowThreads = 256;  // a block of row kernels: 8 warps, one row each
constexpr int kRowsPerBlock = kRowThreads / 32;
// The parameter-gradient kernel: kParamCols columns per block, each summed by kParamRowLanes threads that
// take every kParamRowLanes-th row.
constexpr int kParamThreads = 1024;
constexpr int kParamCols = 16;
constexpr int kParamRowLanes = kParamThreads / kParamCols;

// The sum over a warp's lanes, the same bits in every lane (each step adds two equal pairs, commuted).
__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// LayerNorm when kCentered, else RMSNorm (mean taken as 0, no bias). Rows are kVec-aligned when kVec > 1.
template <bool kCentered, int kVec, typename T>
__global__ void __launch_bounds__(kRowThreads)
    norm_forward_kernel(T* out, float* __restrict__ mean, float* __restrict__ rstd, const T* inp,
                        const T* __restrict__ weight, const T* __restrict__ bias, int64_t N, int64_t C,
                        float eps) {
  const int64_t i = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  if (i >= N) return;  // the whole warp
  const int lane = threadIdx.x % 32;
  const T* x = inp + i * C;
  T* y = out + i * C;
  float sum = 0.0f;
  if constexpr (kCentered) {
    for (int64_t j = lane * kVec; j < C; j += 32 * kVec) {
      float v[kVec];
      load_f32<kVec>(v, x + j);
#pragma unroll
      for (int k = 0; k < kVec; ++k) sum += v[k];
    }
    sum = warp_sum(sum);
  }
  const float m = kCentered ? sum / static_cast<float>(C) : 0.0f;
  // Two passes, as the CPU: the variance of centered values does not cancel when the mean is large.
  float sq = 0.0f;
  for (int64_t j = lane * kVec; j < C; j += 32 * kVec) {
    float v[kVec];
    load_f32<kVec>(v, x + j);
#pragma unroll
    for (int k = 0; k < kVec; ++k) sq += (v[k] - m) * (v[k] - m);
  }
  sq = warp_sum(sq);
  const float s = 1.0f / sqrtf(sq / static_cast<float>(C) + eps);
  for (int64_t j = lane * kVec; j < C; j += 32 * kVec) {
    float v[kVec], w[kVec], b[kVec];
    load_f32<kVec>(v, x + j);
    load_f32<kVec>(w, weight + j);
    if constexpr (kCentered) load_f32<kVec>(b, bias + j);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = kCentered ? (v[k] - m) * s * w[k] + b[k] : v[k] * s * w[k];
    store_f32<kVec>(y + j, v);
  }
  if (lane == 0) {
    if constexpr (kCentered) mean[i] = m;
    rstd[i] = s;
  }
}

// dinp += s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight (RMSNorm: no
// mean(dnorm) term). Each value of dinp is read and then written by the same lane.
template <bool kCentered, int kVec, typename T>
__global__ void __launch_bounds__(kRowThreads)
    norm_backward_input_kernel(T* dinp, const T* dout, const T* __restrict__ inp,
                               const T* __restrict__ weight, const float* __restrict__ mean,
                               const float* __restrict__ rstd, int64_t N, int64_t C) {
  const int64_t i = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  if (i >= N) return;
  const int lane = threadIdx.x % 32;
  const T* x = inp + i * C;
  const T* dy = dout + i * C;
  T* dx = dinp + i * C;
  const float m = kCentered ? mean[i] : 0.0f, s = rstd[i];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int64_t j = lane * kVec; j < C; j += 32 * kVec) {
    float xv[kVec], dyv[kVec], wv[kVec];
    load_f32<kVec>(xv, x + j);
    load_f32<kVec>(dyv, dy + j);
    load_f32<kVec>(wv, weight + j);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float dnorm = dyv[k] * wv[k];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * (xv[k] - m) * s;
    }
  }
  const float dnorm_mean = kCentered ? warp_sum(dnorm_sum) / static_cast<float>(C) : 0.0f;
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / static_cast<float>(C);
  for (int64_t j = lane * kVec; j < C; j += 32 * kVec) {
    float xv[kVec], dyv[kVec], wv[kVec], dxv[kVec];
    load_f32<kVec>(xv, x + j);
    load_f32<kVec>(dyv, dy + j);
    load_f32<kVec>(wv, weight + j);
    load_f32<kVec>(dxv, dx + j);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float norm = (xv[k] - m) * s;
      dxv[k] = dxv[k] + s * (dyv[k] * wv[k] - dnorm_mean - norm * dnorm_norm_mean);
    }
    store_f32<kVec>(dx + j, dxv);
  }
}

// dweight[j] += sum over rows of dout * (inp - mean) * rstd, dbias[j] += sum of dout (LayerNorm only), in
// fp32 and rounded once: thread (lane_row, col) sums rows lane_row, lane_row + kParamRowLanes, ... in order,
// then one thread per column adds the kParamRowLanes partial sums in order.
template <bool kCentered, typename T, typename G>
__global__ void __launch_bounds__(kParamThreads)
    norm_backward_params_kernel(G* __restrict__ dweight, G* __restrict__ dbias, const T* __restrict__ dout,
                                const T* __restrict__ inp, const float* __restrict__ mean,
                                const float* __restrict__ rstd, int64_t N, int64_t C) {
  __shared__ float dw_part[kParamRowLanes][kParamCols], db_part[kParamRowLanes][kParamCols];
  const int col = threadIdx.x % kParamCols, lane_row = threadIdx.x / kParamCols;
  const int64_t j = blockIdx.x * int64_t{kParamCols} + col;
  float dw = 0.0f, db = 0.0f;
  if (j < C) {
#pragma unroll 4
    for (int64_t i = lane_row; i < N; i += kParamRowLanes) {
      const float dy = to_f32(dout[i * C + j]), x = to_f32(inp[i * C + j]);
      const float m = kCentered ? mean[i] : 0.0f, s = rstd[i];
      dw += dy * (x - m) * s;
      db += dy;
    }
  }
  dw_part[lane_row][col] = dw;
  db_part[lane_row][col] = db;
  __syncthreads();
  if (lane_row != 0 || j >= C) return;
  float dw_total = 0.0f, db_total = 0.0f;
  for (int r = 0; r < kParamRowLanes; ++r) {
    dw_total += dw_part[r][col];
    db_total += db_part[r][col];
  }
  dweight[j] = round_to<G>(to_f32(dweight[j]) + dw_total);
  if constexpr (kCentered) dbias[j] = round_to<G>(to_f32(dbias[j]) + db_total);
}

unsigned row_blocks(int64_t N) {
  return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
}

// Rows stay 16-byte aligned when C is a multiple of the pack (every tensor starts on 256 bytes).
template <bool kCentered, typename T>
void launch_norm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                         int64_t N, int64_t C, float eps, cudaStream_t stream, const char* name) {
  if (N <= 0 || C <= 0) return;
  if (C % kWide<T> == 0)
    norm_forward_kernel<kCentered, kWide<T>>
        <<<row_blocks(N), kRowThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C, eps);
  else
    norm_forward_kernel<kCentered, 1>
        <<<row_blocks(N), kRowThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C, eps);
  check_launch(name);
}

// The input gradient first, then the parameter gradients (a frozen norm, null dweight, skips them).
template <bool kCentered, typename T, typename G>
void launch_norm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                          const float* mean, const float* rstd, int64_t N, int64_t C, cudaStream_t stream,
                          const char* name) {
  if (N <= 0 || C <= 0) return;
  if (C % kWide<T> == 0)
    norm_backward_input_kernel<kCentered, kWide<T>>
        <<<row_blocks(N), kRowThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  else
    norm_backward_input_kernel<kCentered, 1>
        <<<row_blocks(N), kRowThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  check_launch(name);
  if (!dweight) return;
  const auto blocks = static_cast<unsigned>((C + kParamCols - 1) / kParamCols);
  norm_backward_params_kernel<kCentered>
      <<<blocks, kParamThreads, 0, stream>>>(dweight, dbias, dout, inp, mean, rstd, N, C);
  check_launch(name);
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C, float eps, cudaStream_t stream) {
  launch_norm_forward<true>(out, mean, rstd, inp, weight, bias, N, C, eps, stream, "layernorm_forward");
}

template <typename T, typename G>
void layernorm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, cudaStream_t stream) {
  launch_norm_backward<true>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream,
                             "layernorm_backward");
}

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C, float eps,
                     cudaStream_t stream) {
  launch_norm_forward<false>(out, static_cast<float*>(nullptr), rstd, inp, weight,
                             static_cast<const T*>(nullptr), N, C, eps, stream, "rmsnorm_forward");
}

template <typename T, typename G>
void rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* weight, const float* rstd,
                      int64_t N, int64_t C, cudaStream_t stream) {
  launch_norm_backward<false>(dinp, dweight, static_cast<G*>(nullptr), dout, inp, weight,
                              static_cast<const float*>(nullptr), rstd, N, C, stream, "rmsnorm_backward");
}

#define MT_NORM_FORWARD(T)                                                                               \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, int64_t, \
                                     float, cudaStream_t);                                               \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float, cudaStream_t);
#define MT_NORM_BACKWARD(T, G)                                                                               \
  template void layernorm_backward<T, G>(T*, G*, G*, const T*, const T*, const T*, const float*,             \
                                         const float*, int64_t, int64_t, cudaStream_t);                      \
  template void rmsnorm_backward<T, G>(T*, G*, const T*, const T*, const T*, const float*, int64_t, int64_t, \
                                       cudaStream_t);
MT_NORM_FORWARD(float)
MT_NORM_FORWARD(bf16)
MT_NORM_FORWARD(f16)
MT_NORM_BACKWARD(float, float)
MT_NORM_BACKWARD(bf16, float)
MT_NORM_BACKWARD(bf16, bf16)
MT_NORM_BACKWARD(f16, float)
#undef MT_NORM_FORWARD
#undef MT_NORM_BACKWARD

}  // namespace mt::cuda
