// Converting buffers between storage types (fp32 <-> bf16/f16), rounding to nearest even.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace mt::kernels {

// dst[i] = round_to<To>(to_f32(src[i])). The identical-type case is a copy.
template <typename To, typename From>
void convert(To* dst, const From* src, int64_t n);

}  // namespace mt::kernels
