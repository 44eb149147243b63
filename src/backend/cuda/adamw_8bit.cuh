// AdamW over 8-bit block-quantized moments on the GPU: BIT FOR BIT the CPU's kernels::adamw_update_8bit
// (backend/cpu/adamw_8bit.h): each quantization block dequantized, stepped with the shared per-element
// arithmetic (core/adamw_element.h), and requantized by the definitions of backend/cpu/block_quant.h (the
// dynamic maps' own lookup tables, copied to the GPU once).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "core/adamw_step.h"
#include "core/half.h"

namespace mt::cuda {

// Copies the dynamic maps' tables (backend/cpu/dynamic_map.h) to the current GPU: once, before any
// adamw_update_8bit (synchronous; no allocation: they are static device arrays).
void upload_dynamic_maps();
// The signed map's 256 values on the current GPU, as upload_dynamic_maps put them: double-quantized weight
// absmaxes are read back through them too (weight_quant.cu).
const float* signed_dynamic_map_values();

// As the CPU's: elements [0, n) from a quantization block's start, moments' codes and scales in `moments`
// (device memory), `runs` (HOST memory: the decay of each element, starting at 0, increasing) give each
// element's weight decay. P: float, bf16, f16; G: float, bf16. A quantization block may hold at most 64 runs
// (std::logic_error otherwise); longer lists take several launches.
template <typename P, typename G>
void adamw_update_8bit(float* master, P* param, const G* grad, const QuantizedMoments& moments, int64_t n,
                       const AdamWStep& s, std::span<const DecayRun> runs, const AdamWRounding& rounding,
                       cudaStream_t stream);

}  // namespace mt::cuda
