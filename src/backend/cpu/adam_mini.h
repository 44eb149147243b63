// Adam-mini's step over one parameter tensor (Zhang et al. 2024, Algorithm 1): AdamW's per-element first
// moment, bias corrections, eps and decoupled weight decay (adamw_math.h), with one fp32 second moment per
// block, v_b = beta2 v_b + (1 - beta2) mean(g^2 over the block).
#pragma once

#include <cstdint>

#include "core/adamw_step.h"
#include "core/half.h"

namespace mt::kernels {

// P: weight storage (float, bf16, f16); G: gradient (float, bf16); M: the first moment (float, bf16, rounded
// to nearest). master and the weights as adamw_update (adamw.h); v holds the tensor's blocks.count second
// moments. Each block's mean of g^2 is summed in double in a fixed order: the same bits for any thread count.
template <typename P, typename G, typename M>
void adam_mini_update(float* master, P* param, const G* grad, M* m, float* v, const MiniBlockLayout& blocks,
                      const AdamWStep& s, const AdamWRounding& rounding);

}  // namespace mt::kernels
