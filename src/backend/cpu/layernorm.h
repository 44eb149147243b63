// LayerNorm and RMSNorm over the last dimension (C) of N rows, with the per-row statistics saved for
// backward.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace mt::kernels {

// out = (inp - mean) * rstd * weight + bias; mean[N] and rstd[N] are written for the backward pass.
// T is the storage type of activations and weights (float, bf16 or f16); statistics are always fp32.
template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C, float eps);

// dinp += d(loss)/d(inp); dweight += ...; dbias += ... (all accumulate, as residual streams and
// gradient accumulation need; a null dweight, a frozen norm, gets none). Parameter gradients sum rows in a
// fixed order, independent of threads. G is the gradient storage type (float or bf16); each parameter
// gradient element is added to once per call.
template <typename T, typename G>
void layernorm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C);

// RMSNorm (LLaMA): out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps), saved in rstd[N].
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C, float eps);

// dinp += d(loss)/d(inp); dweight += ...: accumulating and thread-count independent, as layernorm_backward.
template <typename T, typename G>
void rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* weight, const float* rstd,
                      int64_t N, int64_t C);

}  // namespace mt::kernels
