// Element-wise pieces of the transformer block: GELU (tanh approximation, GPT-2) and SwiGLU (LLaMA).
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

// SwiGLU over M rows: out[M,I] = silu(gate) * up, where each row of inp[M,2I] is [gate (I) | up (I)] (the
// fused gate_proj and up_proj outputs) and silu(x) = x * sigmoid(x).
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t M, int64_t I);

// dinp[M,2I] = [dout * up * silu'(gate) | dout * silu(gate)] (overwritten).
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t M, int64_t I);

}  // namespace mt::kernels
