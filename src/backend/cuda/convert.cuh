// Converting device buffers between storage types (fp32, bf16, f16), rounding to nearest even: the same bits
// as the CPU's kernels::convert (backend/cpu/convert.h), through core/half.h's shared conversions.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"

namespace mt::cuda {

// dst[i] = round_to<To>(to_f32(src[i])), for every pair of float, bf16 and f16 (16-bit to 16-bit goes through
// fp32, exactly). The identical-type case is a copy.
template <typename To, typename From>
void convert(To* dst, const From* src, int64_t n, cudaStream_t stream);

}  // namespace mt::cuda
