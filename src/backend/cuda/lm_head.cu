// The LM head's loss on the GPU: cuBLASLt's products (matmul.cuh) around one softmax cross-entropy kernel.
// A block takes a row: one pass over the V real columns finds the maximum and the sum of exponentials
// together (online: the sum is rescaled when the maximum grows), reduced across the block in a fixed order;
// a second pass writes the gradient grad_scale * (softmax - onehot) over the logits, zeros in the padded
// columns, and its T rounding into dlogits (the CPU's convert, fused). Deterministic: no atomics.
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/lm_head.cuh"
#include "backend/cuda/matmul.cuh"

namespace mt::cuda {

namespace {

constexpr int kThreads = 512;

// A running maximum and the sum of exp(x - max) over the values seen.
struct MaxSum {
  float max = -INFINITY;
  float sum = 0.0f;
};

__device__ inline void add_value(MaxSum& acc, float x) {
  if (x > acc.max) {
    acc.sum = acc.sum * expf(acc.max - x) + 1.0f;
    acc.max = x;
  } else if (x != -INFINITY) {  // exp(-inf) adds nothing, and -inf - -inf would be NaN
    acc.sum += expf(x - acc.max);
  }
}

// Symmetric in its operands, so the butterfly's lanes agree bit for bit; an empty side (sum 0) adds nothing.
__device__ inline MaxSum combine(MaxSum a, MaxSum b) {
  MaxSum r;
  r.max = fmaxf(a.max, b.max);
  const float from_a = a.sum == 0.0f ? 0.0f : a.sum * expf(a.max - r.max);
  const float from_b = b.sum == 0.0f ? 0.0f : b.sum * expf(b.max - r.max);
  r.sum = from_a + from_b;
  return r;
}

__device__ inline MaxSum warp_combine(MaxSum acc) {
  for (int offset = 16; offset > 0; offset /= 2) {
    MaxSum other;
    other.max = __shfl_xor_sync(0xffffffffu, acc.max, offset);
    other.sum = __shfl_xor_sync(0xffffffffu, acc.sum, offset);
    acc = combine(acc, other);
  }
  return acc;
}

// The whole block's maximum and sum, the same in every thread.
__device__ MaxSum block_combine(MaxSum acc) {
  __shared__ float warp_max[kThreads / 32], warp_sum[kThreads / 32], total_max, total_sum;
  acc = warp_combine(acc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_max[warp] = acc.max;
    warp_sum[warp] = acc.sum;
  }
  __syncthreads();
  if (warp == 0) {
    MaxSum part;
    if (lane < kThreads / 32) {
      part.max = warp_max[lane];
      part.sum = warp_sum[lane];
    }
    part = warp_combine(part);
    if (lane == 0) {
      total_max = part.max;
      total_sum = part.sum;
    }
  }
  __syncthreads();
  MaxSum total;
  total.max = total_max;
  total.sum = total_sum;
  return total;
}

// Row i's maximum and sum of exponentials over its V real columns; float4 loads when rows are 16-byte
// aligned (Vp a multiple of 4; the logits start on 256 bytes).
template <bool kVec>
__device__ MaxSum row_max_sum(const float* __restrict__ row, int64_t V) {
  MaxSum acc;
  int64_t scalar_from = 0;
  if constexpr (kVec) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int64_t k = threadIdx.x; k < V / 4; k += kThreads) {
      const float4 v = row4[k];
      add_value(acc, v.x);
      add_value(acc, v.y);
      add_value(acc, v.z);
      add_value(acc, v.w);
    }
    scalar_from = V / 4 * 4;
  }
  for (int64_t j = scalar_from + threadIdx.x; j < V; j += kThreads) add_value(acc, row[j]);
  return block_combine(acc);
}

// One column's gradient, as the CPU's finish_grad: exp * norm, less grad_scale at the target, 0 past V.
__device__ inline float grad_at(float x, int64_t j, int64_t V, int64_t target, float max, float norm,
                                float grad_scale) {
  if (j >= V) return 0.0f;
  float g = expf(x - max) * norm;
  if (j == target) g -= grad_scale;
  return g;
}

template <typename T, int kWidth>
struct alignas(sizeof(T) * kWidth) Pack {
  T v[kWidth];
};

template <typename T, bool kVec>
__device__ void write_grad(float* __restrict__ row, T* __restrict__ drow, int64_t V, int64_t Vp,
                           int64_t target, float max, float norm, float grad_scale) {
  int64_t scalar_from = 0;
  if constexpr (kVec) {
    float4* row4 = reinterpret_cast<float4*>(row);
    for (int64_t k = threadIdx.x; k < Vp / 4; k += kThreads) {
      float4 v = row4[k];
      const int64_t j = 4 * k;
      v.x = grad_at(v.x, j, V, target, max, norm, grad_scale);
      v.y = grad_at(v.y, j + 1, V, target, max, norm, grad_scale);
      v.z = grad_at(v.z, j + 2, V, target, max, norm, grad_scale);
      v.w = grad_at(v.w, j + 3, V, target, max, norm, grad_scale);
      row4[k] = v;
      if (drow) {
        const Pack<T, 4> rounded{{round_to<T>(v.x), round_to<T>(v.y), round_to<T>(v.z), round_to<T>(v.w)}};
        reinterpret_cast<Pack<T, 4>*>(drow)[k] = rounded;
      }
    }
    scalar_from = Vp / 4 * 4;
  }
  for (int64_t j = scalar_from + threadIdx.x; j < Vp; j += kThreads) {
    const float g = grad_at(row[j], j, V, target, max, norm, grad_scale);
    row[j] = g;
    if (drow) drow[j] = round_to<T>(g);
  }
}

// losses[i] = -log softmax(logits[i, :V])[target]; with compute_grad the row becomes its gradient (and
// dlogits, when not null, its rounding). A masked-out row has loss 0 and a zero gradient.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    softmax_cross_entropy_kernel(float* __restrict__ logits, T* __restrict__ dlogits,
                                 float* __restrict__ losses, const int32_t* __restrict__ targets,
                                 const uint8_t* __restrict__ loss_mask, int64_t V, int64_t Vp,
                                 bool compute_grad, float grad_scale) {
  const int64_t i = blockIdx.x;
  float* row = logits + i * Vp;
  T* drow = dlogits ? dlogits + i * Vp : nullptr;
  if (loss_mask && !loss_mask[i]) {
    if (threadIdx.x == 0) losses[i] = 0.0f;
    if (!compute_grad) return;
    for (int64_t j = threadIdx.x; j < Vp; j += kThreads) {
      row[j] = 0.0f;
      if (drow) drow[j] = round_to<T>(0.0f);
    }
    return;
  }
  const int64_t target = targets[i];
  // Read before the gradient overwrites the row (block_combine's barriers order it before any write); a
  // target outside the row (the CPU reads it unchecked) gives a NaN loss instead of a fault.
  const float target_logit = target >= 0 && target < Vp ? row[target] : NAN;
  const MaxSum total = row_max_sum<kVec>(row, V);
  if (threadIdx.x == 0) losses[i] = logf(total.sum) + total.max - target_logit;
  if (compute_grad)
    write_grad<T, kVec>(row, drow, V, Vp, target, total.max, grad_scale / total.sum, grad_scale);
}

template <typename T>
void softmax_cross_entropy(float* logits, T* dlogits, float* losses, const int32_t* targets,
                           const uint8_t* loss_mask, int64_t N, int64_t V, int64_t Vp, bool compute_grad,
                           float grad_scale, cudaStream_t stream) {
  if (N == 0) return;
  if (Vp % 4 == 0)
    softmax_cross_entropy_kernel<T, true><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
        logits, dlogits, losses, targets, loss_mask, V, Vp, compute_grad, grad_scale);
  else
    softmax_cross_entropy_kernel<T, false><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
        logits, dlogits, losses, targets, loss_mask, V, Vp, compute_grad, grad_scale);
  check_launch("lm_head_loss_chunk: softmax_cross_entropy");
}

}  // namespace

template <typename T, typename G>
void lm_head_loss_chunk(cublasLtHandle_t lt, const LmHeadChunk<T, G>& c, float* workspace,
                        int64_t workspace_bytes, cudaStream_t stream) {
  if (c.split)
    throw std::logic_error(
        "cuda backend: lm_head_loss_chunk: a split vocabulary (tensor parallel) does not "
        "run on the GPU");
  const bool training = c.dx != nullptr;
  if (training && !std::is_same_v<T, float> && !c.dlogits)
    throw std::logic_error("cuda backend: lm_head_loss_chunk: 16-bit training without dlogits");
  gemm(lt, false, true, c.rows, c.Vp, c.C, c.x, c.C, c.wte, c.C, 0.0f, c.logits, c.Vp, workspace,
       workspace_bytes, stream);
  // For fp32 T the gradient stays in the logits; for 16-bit T the kernel rounds it into dlogits as well.
  T* rounded = std::is_same_v<T, float> || !training ? nullptr : c.dlogits;
  softmax_cross_entropy(c.logits, rounded, c.losses, c.targets, c.loss_mask, c.rows, c.V, c.Vp, training,
                        c.grad_scale, stream);
  if (!training) return;
  const T* dlogits;
  if constexpr (std::is_same_v<T, float>)
    dlogits = c.logits;
  else
    dlogits = c.dlogits;
  gemm(lt, false, false, c.rows, c.C, c.Vp, dlogits, c.Vp, c.wte, c.C, 0.0f, c.dx, c.C, workspace,
       workspace_bytes, stream);
  if (c.dwte)
    gemm(lt, true, false, c.Vp, c.C, c.rows, dlogits, c.Vp, c.x, c.C, 1.0f, c.dwte, c.C, workspace,
         workspace_bytes, stream);
}

template <typename T>
void logits(cublasLtHandle_t lt, float* out, const T* x, const T* wte, int64_t N, int64_t C, int64_t Vp,
            float* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  gemm(lt, false, true, N, Vp, C, x, C, wte, C, 0.0f, out, Vp, workspace, workspace_bytes, stream);
}

template void lm_head_loss_chunk<float, float>(cublasLtHandle_t, const LmHeadChunk<float, float>&, float*,
                                               int64_t, cudaStream_t);
template void lm_head_loss_chunk<bf16, float>(cublasLtHandle_t, const LmHeadChunk<bf16, float>&, float*,
                                              int64_t, cudaStream_t);
template void lm_head_loss_chunk<bf16, bf16>(cublasLtHandle_t, const LmHeadChunk<bf16, bf16>&, float*,
                                             int64_t, cudaStream_t);
template void lm_head_loss_chunk<f16, float>(cublasLtHandle_t, const LmHeadChunk<f16, float>&, float*,
                                             int64_t, cudaStream_t);
template void logits<float>(cublasLtHandle_t, float*, const float*, const float*, int64_t, int64_t, int64_t,
                            float*, int64_t, cudaStream_t);
template void logits<bf16>(cublasLtHandle_t, float*, const bf16*, const bf16*, int64_t, int64_t, int64_t,
                           float*, int64_t, cudaStream_t);
template void logits<f16>(cublasLtHandle_t, float*, const f16*, const f16*, int64_t, int64_t, int64_t, float*,
                          int64_t, cudaStream_t);

}  // namespace mt::cuda
