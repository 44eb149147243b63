// AdamW on the GPU over fp32 or bf16 moments: BIT FOR BIT the CPU's kernels::adamw_update
// (backend/cpu/adamw.h), through the per-element arithmetic both share (core/adamw_element.h) with the same
// coefficients, computed on the host as the CPU computes them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/adamw_step.h"
#include "core/half.h"

namespace mt::cuda {

// P: weight storage (float, bf16, f16); G: gradient (float, bf16); M: moments (float, bf16). As the CPU's:
// with master != null the step runs on master and param receives it rounded to nearest even; with
// master == null a float param is updated in place and a bf16 one rounded stochastically; f16 weights
// without a master are std::invalid_argument. bf16 moments are stored nearest even, or stochastically when
// rounding.stochastic_moments. Pointers are device memory.
template <typename P, typename G, typename M>
void adamw_update(float* master, P* param, const G* grad, M* m, M* v, int64_t n, const AdamWStep& s,
                  const AdamWRounding& rounding, cudaStream_t stream);

}  // namespace mt::cuda
