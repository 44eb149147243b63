// Block-wise 8-bit storage of Adam's moments. A moment tensor of n fp32 values is cut into blocks of
// consecutive elements, the last one possibly shorter; each block stores one byte per element and one fp32
// scale:
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

namespace mt::kernels {

// How a run stores Adam's two moments in 8 bits.
enum class MomentFormat { int8, fp8 };

// How one moment's bytes are read: the dynamic map of its sign, or e4m3.
enum class MomentCodec { dynamic_signed, dynamic_unsigned, e4m3 };

constexpr int64_t kInt8MomentBlock = 2048;
constexpr int64_t kFp8MomentBlock = 128;

constexpr MomentCodec first_moment_codec(MomentFormat f) {
  return f == MomentFormat::int8 ? MomentCodec::dynamic_signed : MomentCodec::e4m3;
}
constexpr MomentCodec second_moment_codec(MomentFormat f) {
  return f == MomentFormat::int8 ? MomentCodec::dynamic_unsigned : MomentCodec::e4m3;
}
constexpr int64_t moment_block_size(MomentCodec c) {
  return c == MomentCodec::e4m3 ? kFp8MomentBlock : kInt8MomentBlock;
}
constexpr int64_t moment_block_size(MomentFormat f) {
  return moment_block_size(first_moment_codec(f));
}
// Scales of n elements: one per block, the last block possibly shorter.
constexpr int64_t moment_block_count(MomentCodec c, int64_t n) {
  return (n + moment_block_size(c) - 1) / moment_block_size(c);
}

// The byte that reads back as 0 (what a fresh, all-zero moment holds, with scales 0).
inline uint8_t zero_code(MomentCodec c) {
  return c == MomentCodec::dynamic_signed ? signed_dynamic_map().zero_code : 0;  // unsigned: 0.0 is the least
}

// x[0, n) -> codes[0, n) and scales[0, moment_block_count(c, n)); blocks start at x[0].
void quantize_blocks(MomentCodec c, const float* x, int64_t n, uint8_t* codes, float* scales);
// The inverse: codes and scales -> x[0, n).
void dequantize_blocks(MomentCodec c, const uint8_t* codes, const float* scales, int64_t n, float* x);

}  // namespace mt::kernels
