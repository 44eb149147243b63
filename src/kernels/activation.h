// Element-wise pieces of the transformer block: GELU (tanh approximation) and residual addition.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace mt::kernels {

// T is the storage type (float, bf16 or f16); the arithmetic is fp32.
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);

// dinp = dout * gelu'(inp). dinp may alias dout (in-place backward).
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);

}  // namespace mt::kernels
