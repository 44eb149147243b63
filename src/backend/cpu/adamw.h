// AdamW exactly as torch.optim.AdamW (bias correction, eps outside the sqrt, decoupled weight decay), for
// every way model states are stored: fp32 weights; 16-bit weights with an fp32 master copy; bf16 weights
// without one. Moments are fp32 or bf16 (O2), gradients fp32 or bf16. Stored values are upcast to fp32 in
// registers, updated, and rounded back: no upcast buffer exists. Also the reductions clipping needs.
#pragma once

#include <cstdint>

#include "core/adamw_step.h"
#include "core/half.h"

namespace mt::kernels {

// P: weight storage (float, bf16, f16); G: gradient (float, bf16); M: moments (float, bf16).
// With master != null the update runs on master (fp32) and param receives it rounded to nearest even (a
// float param gets it exactly). With master == null and P = float, param is updated in place. With
// master == null and P = bf16 the weights are updated in place and rounded stochastically (the
// no-master-weights mode). f16 weights without a master are not a supported mode: std::invalid_argument.
// bf16 moments are upcast, updated in fp32, and rounded only for storage; this step uses the fp32 values.
template <typename P, typename G, typename M>
void adamw_update(float* master, P* param, const G* grad, M* m, M* v, int64_t n, const AdamWStep& s,
                  const AdamWRounding& rounding);

// Sum of squares in double, over fixed-size chunks summed in a fixed order: the same bits for any thread
// count. Non-finite elements make the result non-finite (how overflow is detected).
template <typename G>
double sum_of_squares(const G* x, int64_t n);

}  // namespace mt::kernels
