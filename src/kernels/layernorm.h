// LayerNorm over the last dimension (C) of N rows, with the per-row statistics saved for backward.
#pragma once

#include <cstdint>

namespace mt::kernels {

// out = (inp - mean) * rstd * weight + bias; mean[N] and rstd[N] are written for the backward pass.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps);

// dinp += d(loss)/d(inp); dweight += ...; dbias += ... (all accumulate, as residual streams and
// gradient accumulation need). Parameter gradients sum rows in a fixed order, independent of threads.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);

}  // namespace mt::kernels
