// The CUDA kernels of LayerNorm and RMSNorm over the last dimension (C) of N rows, with the operands of
// src/backend/cpu/layernorm.h and the launch's stream last.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"

namespace mt::cuda {

// Writes out[N,C] = (inp - mean) * rstd * weight + bias, mean[N] and rstd[N] (fp32, rstd = 1/sqrt(var +
// eps)). T is float, bf16 or f16; math fp32.
template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C, float eps, cudaStream_t stream);

// Accumulates: dinp += d(loss)/d(inp); dweight += ..., dbias += ... (each parameter gradient element
// rounded to G once per call; a null dweight, a frozen norm, gets no parameter gradients). G is float or
// bf16. Deterministic: the rows are summed in a fixed order without atomics.
template <typename T, typename G>
void layernorm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, cudaStream_t stream);

// Writes out[N,C] = inp * rstd * weight and rstd[N] = 1 / sqrt(mean(inp^2) + eps).
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C, float eps,
                     cudaStream_t stream);

// Accumulates dinp += ... and dweight += ..., as layernorm_backward.
template <typename T, typename G>
void rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* weight, const float* rstd,
                      int64_t N, int64_t C, cudaStream_t stream);

}  // namespace mt::cuda
