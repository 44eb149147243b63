// The CUDA kernels of rotary position embeddings (LLaMA), in place on the query and key heads of a fused qkv
// tensor, with the operands of src/backend/cpu/rope.h and the launch's stream last. Hugging Face's
// rotate_half convention: within a head, value i pairs with value i + hs/2 and the pair turns by the angle
// t * theta^(-2i/hs), t being positions[b,t] (packed sequences) or, with positions null, t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"
#include "exec/op_shapes.h"

namespace mt::cuda {

// Rotates the NH query and NKV key heads of each row of qkv[B,T,layout.row()] in place; v is left alone.
// T is float, bf16 or f16; math fp32.
template <typename T>
void rope_forward(T* qkv, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                  float theta, cudaStream_t stream);

// The opposite rotation of dq and dk in dqkv, in place (the gradient through rope_forward).
template <typename T>
void rope_backward(T* dqkv, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                   float theta, cudaStream_t stream);

}  // namespace mt::cuda
