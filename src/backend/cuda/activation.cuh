// The CUDA kernels of the element-wise activations: GELU (tanh approximation, GPT-2) and SwiGLU (LLaMA),
// forward and backward, with the operands of src/backend/cpu/activation.h and the launch's stream last.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"

namespace mt::cuda {

// out[n] = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of inp[n]. T is float, bf16 or f16; math fp32.
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream);

// dinp[n] = dout * gelu'(inp) (overwritten); dinp may alias dout.
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream);

// out[M,I] = silu(gate) * up, each row of inp[M,2I] being [gate (I) | up (I)].
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t M, int64_t I, cudaStream_t stream);

// dinp[M,2I] = [dout * up * silu'(gate) | dout * silu(gate)] (overwritten).
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t M, int64_t I, cudaStream_t stream);

}  // namespace mt::cuda
