// AdamW with the moments stored in 8 bits, block-wise (block_quant.h: int8 with the dynamic map, or fp8
// e4m3). Per block: the moments are dequantized into a block-sized buffer, updated in fp32 with exactly the
// arithmetic of adamw_update (adamw_math.h), requantized, and the block's new scales written. No fp32 copy of
// the moments exists beyond one block per thread.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/adamw.h"
#include "backend/cpu/block_quant.h"

namespace mt::kernels {

// A range's moments: one byte per element, one scale per block, m with first_moment_codec(format) and v with
// second_moment_codec(format). Element 0 is the first of a block (a range is cut on block boundaries; the
// last block may be shorter).
struct QuantizedMoments {
  MomentFormat format;
  uint8_t* m;
  float* m_scales;
  uint8_t* v;
  float* v_scales;
};

// A run of elements with one weight decay: from `begin` (relative to the range) to the next run's begin or
// the range's end, with s.weight_decay when `decay`, none otherwise. A block may hold elements of several
// parameter tensors, so one call updates every tensor of its range: the runs start at 0, in increasing order.
struct DecayRun {
  int64_t begin;
  bool decay;
};

// adamw_update's weights (P float, bf16 or f16; master or not, as there) and gradients (G float or bf16) for
// n elements, with 8-bit moments. rounding.index is element 0's index in the whole parameter buffer (for
// master-less bf16 weights' stochastic rounding); rounding.stochastic_moments is ignored. The result does not
// depend on the thread count or the ISA level. std::invalid_argument for runs that do not start at 0 or do
// not increase.
template <typename P, typename G>
void adamw_update_8bit(float* master, P* param, const G* grad, const QuantizedMoments& moments, int64_t n,
                       const AdamWStep& s, std::span<const DecayRun> runs, const AdamWRounding& rounding);

}  // namespace mt::kernels
