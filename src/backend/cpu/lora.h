// A LoRA adapter's forward and backward on one linear op (model/lora.h): products of the adapter's low-rank
// factors through the library's gemm, writing into a column range of the base op's output and adding into
// its input gradient. Row-major throughout; a [rank, in], b [width, rank], nn.Linear's layout.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace mt::kernels {

struct LoraShape {
  int64_t M = 0;           // rows (B * T)
  int64_t in = 0;          // the base op's input width
  int64_t rank = 0;        // r
  int64_t width = 0;       // the adapter's output columns
  int64_t out_stride = 0;  // the base op's output width (a fused projection's whole row)
  int64_t column = 0;      // the adapter's first output column
  float scale = 1.0f;      // alpha / r
};

// Dropout on the adapter's input (p > 0): element i is kept, times 1 / (1 - p), when the counter-based
// uniform of (seed, stream, draw * n + i) is at least p; the same bits in the forward and the backward.
struct DropoutMask {
  float p = 0.0f;
  uint64_t seed = 0, stream = 0, draw = 0;
};

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
