// Element-wise pieces of the transformer block: GELU (tanh approximation) and residual addition.
#pragma once

#include <cstdint>

namespace mt::kernels {

void gelu_forward(float* out, const float* inp, int64_t n);

// dinp = dout * gelu'(inp). dinp may alias dout (in-place backward).
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

// out = a + b; out may alias a or b.
void add(float* out, const float* a, const float* b, int64_t n);

}  // namespace mt::kernels
