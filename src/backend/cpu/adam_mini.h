// Adam-mini's step over one parameter tensor (Zhang et al. 2024, Algorithm 1): AdamW's per-element first
// moment, bias corrections, eps and decoupled weight decay (adamw_math.h), with one fp32 second moment per
// block, v_b = beta2 v_b + (1 - beta2) mean(g^2 over the block). The first moment in fp32 or bf16, or in 8
// bits as AdamW's (adamw_8bit.h, block_quant.h): one per-element step for both.
#pragma once

#include <cstdint>
#include <span>

#include "core/adamw_step.h"
#include "core/half.h"
#include "core/moment_format.h"

namespace mt::kernels {

// P: weight storage (float, bf16, f16); G: gradient (float, bf16); M: the first moment (float, bf16, rounded
// to nearest). master and the weights as adamw_update (adamw.h); v holds the tensor's blocks.count second
// moments. Each block's mean of g^2 is summed in double in a fixed order: the same bits for any thread count.
template <typename P, typename G, typename M>
void adam_mini_update(float* master, P* param, const G* grad, M* m, float* v, const MiniBlockLayout& blocks,
                      const AdamWStep& s, const AdamWRounding& rounding);

// The same step over n elements from a quantization block's start whose first moment is 8-bit, quantized as
// AdamW's (block_quant.h: first_moment_codec(format), blocks of moment_block_size(format) from element 0,
// m_scales[k] block k's): each block is dequantized, its elements stepped tensor by tensor with exactly
// adam_mini_update's arithmetic, and requantized; their v are updated first. rounding.index is element 0's
// index in the whole parameter buffer. `part` (core/adamw_step.h): the whole step, where `tensors` tile
// [0, n) in order; only the tensors' second moments, where they tile it too; or only the first moments and
// weights, where they cover [0, n) in order (the first may begin before 0, the last end after n) and their v
// are already this step's. std::invalid_argument otherwise.
template <typename P, typename G>
void adam_mini_update_8bit(float* master, P* param, const G* grad, MomentFormat format, uint8_t* m,
                           float* m_scales, int64_t n, std::span<const MiniTensor> tensors,
                           const AdamWStep& s, const AdamWRounding& rounding, MiniStepPart part);

}  // namespace mt::kernels
