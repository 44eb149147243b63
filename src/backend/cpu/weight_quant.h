// Frozen base weights stored in 4 or 8 bits (QLoRA's --base-quant), quantized once and dequantized range by
// range where a product reads them. A weight tensor of n values, flattened in its stored (row-major) order,
// is cut into blocks of 64 consecutive elements, the last one possibly shorter; each block has an absmax:
//   nf4 (Dettmers et al., "QLoRA", 2023): an element's 4-bit code is the index of the NF4 value nearest to
//     element / absmax (a tie to the smaller value); two codes a byte, element 2i in the high nibble of byte
//     i, as bitsandbytes packs them. It reads back as kNf4Values[code] * absmax.
//   int8: scale = absmax / 127, code = the element / scale rounded to nearest even, as a signed byte; it
//     reads back as code * scale.
// An all-zero block (absmax 0) stores the code of 0.
// Double quantization (bitsandbytes' bnb_4bit_use_double_quant): the absmaxes themselves are stored in 8
// bits: their mean is the offset (an fp64 sum in index order, divided, rounded once to fp32), and absmax -
// offset is quantized with the signed dynamic map (dynamic_map.h) in blocks of 256 absmaxes, each with its
// own fp32 absmax (block_quant.h's block-wise int8, with this block length). Without it the absmaxes are
// fp32. Every step is one fp32 operation rounded to nearest, so the bits are the same at every ISA level and
// equal tests/quant's numpy reference.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "core/half.h"
#include "core/int_math.h"

namespace mt::kernels {

enum class WeightFormat { nf4, int8 };

constexpr int64_t kWeightBlock = 64;   // elements per absmax (QLoRA's and bitsandbytes' 4-bit block)
constexpr int64_t kAbsmaxBlock = 256;  // absmaxes per second-level scale (double quantization)

// The 16 NF4 values, ascending: the published table (QLoRA, Appendix E; bitsandbytes), normalized quantiles
// of N(0, 1) with an exact zero. tests/quant derives them from that definition.
inline constexpr std::array<float, 16> kNf4Values = {-1.0f,
                                                     -0.6961928009986877f,
                                                     -0.5250730514526367f,
                                                     -0.39491748809814453f,
                                                     -0.28444138169288635f,
                                                     -0.18477343022823334f,
                                                     -0.09105003625154495f,
                                                     0.0f,
                                                     0.07958029955625534f,
                                                     0.16093020141124725f,
                                                     0.24611230194568634f,
                                                     0.33791524171829224f,
                                                     0.44070982933044434f,
                                                     0.5626170039176941f,
                                                     0.7229568362236023f,
                                                     1.0f};

// A quantized weight tensor's buffers. With double quantization absmax is null and absmax_codes,
// absmax_scales (one per kAbsmaxBlock absmaxes) and absmax_offset (one value) hold the absmaxes; without,
// absmax holds them and the others are null.
struct QuantizedWeight {
  WeightFormat format;
  int64_t n;
  uint8_t* codes;  // nf4: ceil(n / 2) bytes; int8: n
  float* absmax;
  uint8_t* absmax_codes;
  float* absmax_scales;
  float* absmax_offset;
};

// Bytes of each buffer, for the plan: codes, then the absmaxes' storage (fp32, or codes + scales + offset).
constexpr int64_t weight_code_bytes(WeightFormat format, int64_t n) {
  return format == WeightFormat::nf4 ? ceil_div(n, 2) : n;
}
constexpr int64_t weight_absmax_bytes(int64_t n, bool double_quant) {
  const int64_t blocks = ceil_div(n, kWeightBlock);
  return double_quant ? blocks + 4 * ceil_div(blocks, kAbsmaxBlock) + 4 : 4 * blocks;
}

// A stored matrix whose consecutive ranges of whole rows are quantized on their own, in order: the Hugging
// Face tensors of a fused weight (LLaMA's q, k and v stacked by rows), or the one tensor of an unfused one.
using QuantizedMatrix = std::span<const QuantizedWeight>;

// One contiguous buffer holding a quantized tensor of n elements: the fp32 parts first (the absmaxes, or the
// double quantization's scales and offset), then the absmax codes and the codes, padded to 4 bytes so the
// next tensor's floats stay aligned.
constexpr int64_t quantized_weight_bytes(WeightFormat format, int64_t n, bool double_quant) {
  return round_up(weight_code_bytes(format, n) + weight_absmax_bytes(n, double_quant), 4);
}
// The view of such a buffer at `bytes` (4-byte aligned).
QuantizedWeight quantized_weight_at(WeightFormat format, int64_t n, bool double_quant, void* bytes);

// x[0, n) into q (q.n == n; its buffers sized as above).
void quantize_weight(const float* x, const QuantizedWeight& q);
// Elements [first, first + count) of q into out[0, count), rounded to nearest even for bf16 and f16. Any
// range: a product dequantizes the rows of its tile.
template <typename T>
void dequantize_weight(const QuantizedWeight& q, int64_t first, int64_t count, T* out);
// The tile of rows [row0, row0 + rows) and columns [col0, col0 + cols) of q seen as a row-major matrix with
// rows of row_length, into out[rows, cols].
template <typename T>
void dequantize_weight_tile(const QuantizedWeight& q, int64_t row_length, int64_t row0, int64_t rows,
                            int64_t col0, int64_t cols, T* out);
// The same tile of a matrix of several parts, each row read from the part that holds it.
template <typename T>
void dequantize_matrix_tile(QuantizedMatrix parts, int64_t row_length, int64_t row0, int64_t rows,
                            int64_t col0, int64_t cols, T* out);

}  // namespace mt::kernels
