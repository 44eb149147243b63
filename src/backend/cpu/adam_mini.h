// Adam-mini's step over one parameter tensor (Zhang et al. 2024, Algorithm 1): AdamW's per-element first
// moment, bias corrections, eps and decoupled weight decay (adamw_math.h), with one fp32 second moment per
// block, v_b = beta2 v_b + (1 - beta2) mean(g^2 over the block). The second moments are a pass of their own
// over whole tensors, then the first moments and weights over any range: a ZeRO shard or a block of the
// update in the backward may cut a tensor. The first moment in fp32 or bf16, or in 8 bits as AdamW's
// (adamw_8bit.h, block_quant.h): one per-element step for both.
#pragma once

#include <cstdint>
#include <span>

#include "core/adamw_step.h"
#include "core/half.h"
#include "core/moment_format.h"

namespace mt::kernels {

// The tensor's second moments v (blocks.count of them) from its whole gradient grad (G: float, bf16):
// v_b = beta2 v_b + (1 - beta2) mean((g * s.grad_multiplier)^2 over the block), each block's sum in double in
// a fixed order: the same bits for any thread count, and for any cut of the tensor into ranges below.
template <typename G>
void adam_mini_second_moments(const G* grad, float* v, const MiniBlockLayout& blocks, const AdamWStep& s);

// Where a rank holds only part of a tensor's gradient (ZeRO-2 and 3): each block's sum of
// (g * grad_multiplier)^2 over elements [first, first + n) of the tensor (grad holds element `first` at 0),
// added to sums[block], line by line in index order; then, once the sums are the whole tensor's (summed over
// the ranks), v_b = beta2 v_b + (1 - beta2) sums[b] / the block's elements. std::invalid_argument when the
// range leaves the tensor.
template <typename G>
void adam_mini_block_squares(const G* grad, const MiniBlockLayout& blocks, int64_t first, int64_t n,
                             float grad_multiplier, double* sums);
void adam_mini_second_moments_from_sums(float* v, const double* sums, const MiniBlockLayout& blocks,
                                        const AdamWStep& s);

// The first moments and weights of elements [first, first + n) of one tensor whose second moments v are
// already this step's. P: weight storage (float, bf16, f16); G: gradient (float, bf16); M: the first moment
// (float, bf16, rounded to nearest). master (null without master weights), param, grad and m hold element
// `first` at 0; rounding.index is its index in the whole parameter buffer. std::invalid_argument when the
// range leaves the tensor.
template <typename P, typename G, typename M>
void adam_mini_update(float* master, P* param, const G* grad, M* m, const float* v,
                      const MiniBlockLayout& blocks, int64_t first, int64_t n, const AdamWStep& s,
                      const AdamWRounding& rounding);

// The same over n elements from a quantization block's start whose first moment is 8-bit, quantized as
// AdamW's (block_quant.h: first_moment_codec(format), blocks of moment_block_size(format) from element 0,
// m_scales[k] block k's): each block is dequantized, its elements stepped tensor by tensor with exactly
// adam_mini_update's arithmetic, and requantized. The tensors cover [0, n) in order (the first may begin
// before 0, the last end after n), their v already this step's; std::invalid_argument otherwise.
// rounding.index is element 0's index in the whole parameter buffer.
template <typename P, typename G>
void adam_mini_update_8bit(float* master, P* param, const G* grad, MomentFormat format, uint8_t* m,
                           float* m_scales, int64_t n, std::span<const MiniTensor> tensors,
                           const AdamWStep& s, const AdamWRounding& rounding);

}  // namespace mt::kernels
