// The quantizer of frozen base weights stored in 4 or 8 bits (QLoRA's --base-quant; the formats, block sizes
// and buffer layout: core/weight_format.h), quantized once and dequantized range by
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
#include "core/weight_format.h"

namespace mt::kernels {

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
