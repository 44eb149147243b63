// A LoRA adapter's forward and backward on one linear op (model/lora.h): products of the adapter's low-rank
// factors through the library's gemm, writing into a column range of the base op's output and adding into
// its input gradient. Row-major throughout; a [rank, in], b [width, rank], nn.Linear's layout.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "exec/op_shapes.h"

namespace mt::kernels {

// x = inp, or dropout(inp) into `dropped` [M, in] with a mask; hidden[M, rank] = scale * x @ a^T;
// out[:, column:column+width] += hidden @ b^T.
template <typename T>
void lora_forward(T* out, T* hidden, const T* inp, const T* a, const T* b, const LoraShape& s,
                  const DropoutMask& mask, T* dropped, float* scratch);

// db += dout[:, columns]^T @ hidden; g = grad_hidden = scale * dout[:, columns] @ b; da += g^T @ x;
// dinp += g @ a, through the mask's dropout when there is one (`dropped` holds x, then g @ a). Activations
// and weights T, gradients G (float, or bf16 with T = bf16).
template <typename T, typename G>
void lora_backward(T* dinp, G* da, G* db, T* grad_hidden, const T* dout, const T* inp, const T* hidden,
                   const T* a, const T* b, const LoraShape& s, const DropoutMask& mask, T* dropped,
                   float* scratch);

}  // namespace mt::kernels
