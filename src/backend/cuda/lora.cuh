// A LoRA adapter's forward and backward on the GPU, the CUDA mirror of backend/cpu/lora.h: the adapter's
// products through cuBLASLt (matmul.cuh), its scaling and dropout as element-wise kernels. The dropout mask
// is the CPU's: the same counter-based uniform (core/rng.h) of each element's global number, so both backends
// drop the same elements. Row-major throughout; a [rank, in], b [width, rank].
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"
#include "exec/op_shapes.h"

namespace mt::cuda {

// x = inp, or dropout(inp) into `dropped` [M, in] with a mask; hidden[M, rank] = scale * x @ a^T;
// out[:, column:column+width] += hidden @ b^T.
template <typename T>
void lora_forward(cublasLtHandle_t lt, T* out, T* hidden, const T* inp, const T* a, const T* b,
                  const LoraShape& s, const DropoutMask& mask, T* dropped, float* workspace,
                  int64_t workspace_bytes, cudaStream_t stream);

// db += dout[:, columns]^T @ hidden; g = grad_hidden = scale * dout[:, columns] @ b; da += g^T @ x;
// dinp += g @ a, through the mask's dropout when there is one (`dropped` holds x, then g @ a). Activations
// and weights T, gradients G (float, or bf16 with T = bf16).
template <typename T, typename G>
void lora_backward(cublasLtHandle_t lt, T* dinp, G* da, G* db, T* grad_hidden, const T* dout, const T* inp,
                   const T* hidden, const T* a, const T* b, const LoraShape& s, const DropoutMask& mask,
                   T* dropped, float* workspace, int64_t workspace_bytes, cudaStream_t stream);

}  // namespace mt::cuda
