// Rotary position embeddings (LLaMA), in place on the query and key heads of a fused qkv tensor (layout in
// attention.h). Hugging Face's rotate_half convention: within a head, value i pairs with value i + hs/2 and
// the pair turns by the angle t * theta^(-2i/hs), t being the position in the sequence, or in its record
// when positions[B,T] gives it (packed sequences; null: the index in the row).
#pragma once

#include <cstdint>

#include "backend/cpu/attention.h"
#include "core/half.h"

namespace mt::kernels {

// Rotates q and k of qkv[B,T,row] in place; v is left alone. T is the storage type, the arithmetic fp32.
template <typename T>
void rope_forward(T* qkv, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                  float theta);

// The gradient through a rotation is the opposite rotation: turns dq and dk of dqkv back, in place.
template <typename T>
void rope_backward(T* dqkv, const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& layout,
                   float theta);

}  // namespace mt::kernels
