// The block-wise 8-bit quantizer of Adam's moments (the formats and block sizes: core/moment_format.h). A
// moment tensor of n fp32 values is cut into blocks of consecutive elements, the last one possibly shorter;
// each block stores one byte per element and one fp32 scale:
//   int8 (Dettmers et al. 2022): blocks of 2048; the scale is the block's absmax, and an element's byte is
//     the code of the dynamic map (dynamic_map.h) nearest to element / absmax: signed map for the first
//     moment, unsigned for the second, where a positive element takes at least the smallest positive code
//     (rounded to 0 beside a first moment that kept its value, it would make the step m / eps: the loss
//     spikes). It reads back as map.value[code] * absmax.
//   fp8: blocks of 128; the scale is absmax / 448, and an element's byte is round_to_e4m3(element / scale)
//     (core/fp8.h: nearest even, saturating). It reads back as to_f32(byte) * scale.
// absmax is the largest |element|, NaN if any element is NaN. A block whose scale is not positive (all
// zeros, an fp8 scale that underflows, or NaN) stores every byte as the code of 0, so it reads back as zeros,
// or as NaN when the scale is NaN. Every step is one fp32 operation, rounded to nearest, so the bits are the
// same at every ISA level and equal a reference that does the same operations (tests/quant).
// Why these block sizes: docs/optimizer_states.md.
#pragma once

#include <cstdint>

#include "backend/cpu/dynamic_map.h"
#include "core/moment_format.h"

namespace mt::kernels {

// The byte that reads back as 0 (what a fresh, all-zero moment holds, with scales 0).
inline uint8_t zero_code(MomentCodec c) {
  return c == MomentCodec::dynamic_signed ? signed_dynamic_map().zero_code : 0;  // unsigned: 0.0 is the least
}

// x[0, n) -> codes[0, n) and scales[0, moment_block_count(c, n)); blocks start at x[0].
void quantize_blocks(MomentCodec c, const float* x, int64_t n, uint8_t* codes, float* scales);
// The inverse: codes and scales -> x[0, n).
void dequantize_blocks(MomentCodec c, const uint8_t* codes, const float* scales, int64_t n, float* x);

}  // namespace mt::kernels
