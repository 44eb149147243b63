// One block of a block-quantized moment (block_quant.h), for the kernels that read and write them: the block
// quantizer, the dequantizer, and the per-level loops they use. Included by each ISA level's build, so it is
// in that level's namespace.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "backend/cpu/block_quant.h"
#include "backend/cpu/dynamic_map.h"
#include "backend/cpu/isa_variant.h"
#include "core/fp8.h"

namespace mt::kernels::MT_ISA {

// The largest |x[i]|, NaN if any x[i] is NaN. Compared as integers: the bits of non-negative floats order as
// their values, and every NaN's are above infinity's, so the maximum is one integer reduction (std::max on
// floats would drop a NaN, depending on the order).
inline float block_absmax(const float* x, int64_t n) {
  uint32_t largest = 0;
#pragma omp simd reduction(max : largest)
  for (int64_t i = 0; i < n; ++i) largest = std::max(largest, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  return std::bit_cast<float>(largest);
}

// Writes x[0, n)'s bytes into codes and returns the block's scale.
inline float quantize_block(MomentCodec c, const float* x, int64_t n, uint8_t* codes) {
  const float absmax = block_absmax(x, n);
  const float scale = c == MomentCodec::e4m3 ? absmax / kE4m3Max : absmax;
  if (!(scale > 0)) {
    const uint8_t zero = zero_code(c);
    for (int64_t i = 0; i < n; ++i) codes[i] = zero;
    return scale;
  }
  if (c == MomentCodec::e4m3) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) codes[i] = round_to_e4m3(x[i] / scale).bits;
  } else {
    const DynamicMap& map = c == MomentCodec::dynamic_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    // A second moment above zero keeps at least the smallest positive code: read back as 0 beside a first
    // moment that survived, it would make the update m / eps.
    const uint8_t least = c == MomentCodec::dynamic_unsigned ? 1 : 0;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i] / scale;
      const uint8_t code = nearest_code(map, v);
      codes[i] = code == 0 && v > 0 ? least : code;
    }
  }
  return scale;
}

inline void dequantize_block(MomentCodec c, const uint8_t* codes, float scale, int64_t n, float* x) {
  if (c == MomentCodec::e4m3) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] = to_f32(fp8_e4m3{codes[i]}) * scale;
  } else {
    const float* values =
        (c == MomentCodec::dynamic_signed ? signed_dynamic_map() : unsigned_dynamic_map()).value.data();
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] = values[codes[i]] * scale;
  }
}

}  // namespace mt::kernels::MT_ISA
