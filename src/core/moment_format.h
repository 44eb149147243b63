// How Adam's moments are stored in 8 bits, block-wise: the format, each moment's codec and the block sizes.
// A moment tensor of n fp32 values is cut into blocks of consecutive elements, the last one possibly shorter;
// each block stores one byte per element and one fp32 scale. Checkpoints save codes and scales as they are,
// and plans count them, so these facts are shared by every device; the quantizers are each backend's
// (backend/cpu/block_quant.h says what the bytes mean). Why these block sizes: docs/optimizer_states.md.
#pragma once

#include <cstdint>

#include "core/int_math.h"

namespace mt {

// How a run stores Adam's two moments in 8 bits: int8 with the dynamic map (Dettmers et al. 2022), or fp8
// e4m3.
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
  return ceil_div(n, moment_block_size(c));
}

}  // namespace mt
