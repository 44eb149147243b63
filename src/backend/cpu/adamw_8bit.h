// AdamW with the moments stored in 8 bits, block-wise (block_quant.h: int8 with the dynamic map, or fp8
// e4m3). Per block: the moments are dequantized into a block-sized buffer, updated in fp32 with exactly the
// arithmetic of adamw_update (adamw_math.h), requantized, and the block's new scales written. No fp32 copy of
// the moments exists beyond one block per thread.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/adamw.h"
#include "backend/cpu/block_quant.h"
#include "core/adamw_step.h"

namespace mt::kernels {

// adamw_update's weights (P float, bf16 or f16; master or not, as there) and gradients (G float or bf16) for
// n elements, with 8-bit moments. rounding.index is element 0's index in the whole parameter buffer (for
// master-less bf16 weights' stochastic rounding); rounding.stochastic_moments is ignored. The result does not
// depend on the thread count or the ISA level. std::invalid_argument for runs that do not start at 0 or do
// not increase.
template <typename P, typename G>
void adamw_update_8bit(float* master, P* param, const G* grad, const QuantizedMoments& moments, int64_t n,
                       const AdamWStep& s, std::span<const DecayRun> runs, const AdamWRounding& rounding);

}  // namespace mt::kernels
