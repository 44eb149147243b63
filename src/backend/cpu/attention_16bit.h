// The 16-bit (bf16, f16) causal attention kernels behind attention.h: blocks of queries, with the scores,
// the output and the gradients computed as small matrix products (attention_tiles.h). Same layouts and
// contracts as attention.h.
#pragma once

#include <cstdint>

#include "backend/cpu/attention.h"
#include "core/half.h"

namespace mt::kernels {

// Floats of scratch one thread needs.
int64_t attention16_scratch_per_thread(int64_t T, int64_t head_size, DType dtype);

template <typename T>
void attention16_forward(T* out, float* lse, const T* qkv, const int32_t* positions, int64_t B, int64_t T_len,
                         const QkvLayout& qkv_at, float* scratch);

template <typename T>
void attention16_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                          const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& qkv_at,
                          float* scratch);

}  // namespace mt::kernels
