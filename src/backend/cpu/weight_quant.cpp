// Block-wise nf4 and int8 storage of frozen weights, with the absmaxes in fp32 or double-quantized.
#include "backend/cpu/weight_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/block_codec.h"
#include "backend/cpu/isa_variant.h"
#include "core/host_device.h"
#include "core/int_math.h"
#include "core/weight_format.h"

namespace mt::kernels {

namespace MT_ISA {

// This level's copy of the arithmetic the GPU shares (its top says why it has no namespace of its own).
#include "core/weight_element.h"

namespace {

// The NF4 code of x (already divided by its absmax): the midpoints below it. A midpoint of two fp32 values
// is exact in fp64, and x on one goes to the smaller value.
inline uint8_t nf4_code(float x) {
  int code = 0;
  for (int k = 0; k + 1 < 16; ++k)
    code += static_cast<double>(x) > (static_cast<double>(kNf4Values[k]) + kNf4Values[k + 1]) / 2 ? 1 : 0;
  return static_cast<uint8_t>(code);
}

// Block b's codes from x[0, length) and its absmax.
void quantize_block_codes(WeightFormat format, const float* x, int64_t length, float absmax, uint8_t* codes) {
  if (format == WeightFormat::int8) {
    const float scale = absmax / 127.0f;
    for (int64_t i = 0; i < length; ++i)
      codes[i] = static_cast<uint8_t>(static_cast<int8_t>(scale > 0 ? std::nearbyint(x[i] / scale) : 0.0f));
    return;
  }
  for (int64_t i = 0; i < length; i += 2) {
    const uint8_t high = absmax > 0 ? nf4_code(x[i] / absmax) : nf4_code(0.0f);
    const uint8_t low = i + 1 < length ? (absmax > 0 ? nf4_code(x[i + 1] / absmax) : nf4_code(0.0f)) : 0;
    codes[i / 2] = static_cast<uint8_t>(high << 4 | low);
  }
}

}  // namespace

void quantize_weight(const float* x, const QuantizedWeight& q) {
  const int64_t blocks = ceil_div(q.n, kWeightBlock);
  std::vector<float> absmax(q.absmax ? 0 : blocks);
  float* const exact = q.absmax ? q.absmax : absmax.data();
  const int64_t code_bytes_per_block = q.format == WeightFormat::nf4 ? kWeightBlock / 2 : kWeightBlock;
#pragma omp parallel for
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t first = b * kWeightBlock, length = std::min(kWeightBlock, q.n - first);
    exact[b] = block_absmax(x + first, length);
    quantize_block_codes(q.format, x + first, length, exact[b], q.codes + b * code_bytes_per_block);
  }
  if (q.absmax) return;
  double sum = 0;
  for (int64_t b = 0; b < blocks; ++b) sum += exact[b];
  *q.absmax_offset = static_cast<float>(sum / static_cast<double>(blocks));
  for (int64_t b = 0; b < blocks; ++b) exact[b] -= *q.absmax_offset;
#pragma omp parallel for
  for (int64_t g = 0; g < ceil_div(blocks, kAbsmaxBlock); ++g) {
    const int64_t first = g * kAbsmaxBlock;
    q.absmax_scales[g] = quantize_block(MomentCodec::dynamic_signed, exact + first,
                                        std::min(kAbsmaxBlock, blocks - first), q.absmax_codes + first);
  }
}

namespace {

// Elements [lo, hi) of block b into out[0, hi - lo). A loop per format without branches inside, so that it
// vectorizes (the products dequantize every weight on every micro-batch).
template <typename T>
void dequantize_in_block(const QuantizedWeight& q, int64_t b, int64_t lo, int64_t hi, T* out) {
  const float absmax = stored_weight_absmax(q, b, signed_dynamic_map().value.data());
  const uint8_t* codes = q.codes;
  if (q.format == WeightFormat::int8) {
    const float scale = int8_weight_scale(absmax);
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) out[i - lo] = round_to<T>(int8_weight_value(codes, i, scale));
    return;
  }
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i)
    out[i - lo] = round_to<T>(nf4_weight_value(codes, i, absmax, kNf4Values.data()));
}

// Elements [first, first + count) into out, block by block, on the calling thread.
template <typename T>
void dequantize_span(const QuantizedWeight& q, int64_t first, int64_t count, T* out) {
  const int64_t end = first + count;
  for (int64_t b = first / kWeightBlock; b < ceil_div(end, kWeightBlock); ++b) {
    const int64_t lo = std::max(first, b * kWeightBlock), hi = std::min(end, (b + 1) * kWeightBlock);
    dequantize_in_block(q, b, lo, hi, out + (lo - first));
  }
}

}  // namespace

template <typename T>
void dequantize_weight(const QuantizedWeight& q, int64_t first, int64_t count, T* out) {
  const int64_t end = first + count;
#pragma omp parallel for
  for (int64_t b = first / kWeightBlock; b < ceil_div(end, kWeightBlock); ++b) {
    const int64_t lo = std::max(first, b * kWeightBlock), hi = std::min(end, (b + 1) * kWeightBlock);
    dequantize_in_block(q, b, lo, hi, out + (lo - first));
  }
}

template <typename T>
void dequantize_weight_tile(const QuantizedWeight& q, int64_t row_length, int64_t row0, int64_t rows,
                            int64_t col0, int64_t cols, T* out) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) dequantize_span(q, (row0 + r) * row_length + col0, cols, out + r * cols);
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
void quantize_weight(const float* x, const QuantizedWeight& q) {
  dispatch<&quantize_weight>(x, q);
}
template <typename T>
void dequantize_weight(const QuantizedWeight& q, int64_t first, int64_t count, T* out) {
  dispatch<&dequantize_weight<T>>(q, first, count, out);
}
template void dequantize_weight<float>(const QuantizedWeight&, int64_t, int64_t, float*);
template void dequantize_weight<bf16>(const QuantizedWeight&, int64_t, int64_t, bf16*);
template void dequantize_weight<f16>(const QuantizedWeight&, int64_t, int64_t, f16*);
template <typename T>
void dequantize_weight_tile(const QuantizedWeight& q, int64_t row_length, int64_t row0, int64_t rows,
                            int64_t col0, int64_t cols, T* out) {
  dispatch<&dequantize_weight_tile<T>>(q, row_length, row0, rows, col0, cols, out);
}
template void dequantize_weight_tile<float>(const QuantizedWeight&, int64_t, int64_t, int64_t, int64_t,
                                            int64_t, float*);
template void dequantize_weight_tile<bf16>(const QuantizedWeight&, int64_t, int64_t, int64_t, int64_t,
                                           int64_t, bf16*);
template void dequantize_weight_tile<f16>(const QuantizedWeight&, int64_t, int64_t, int64_t, int64_t, int64_t,
                                          f16*);

template <typename T>
void dequantize_matrix_tile(QuantizedMatrix parts, int64_t row_length, int64_t row0, int64_t rows,
                            int64_t col0, int64_t cols, T* out) {
  MT_ISA::for_each_part_of_rows(
      parts, row_length, row0, rows,
      [&](const QuantizedWeight& part, int64_t first, int64_t count, int64_t tile_row) {
        dequantize_weight_tile(part, row_length, first, count, col0, cols, out + tile_row * cols);
      });
}
template void dequantize_matrix_tile<float>(QuantizedMatrix, int64_t, int64_t, int64_t, int64_t, int64_t,
                                            float*);
template void dequantize_matrix_tile<bf16>(QuantizedMatrix, int64_t, int64_t, int64_t, int64_t, int64_t,
                                           bf16*);
template void dequantize_matrix_tile<f16>(QuantizedMatrix, int64_t, int64_t, int64_t, int64_t, int64_t, f16*);

#endif

namespace MT_ISA {
namespace {
const bool enrolled = enroll<&kernels::quantize_weight>(quantize_weight) &&
                      enroll<&kernels::dequantize_weight<float>>(dequantize_weight) &&
                      enroll<&kernels::dequantize_weight<bf16>>(dequantize_weight) &&
                      enroll<&kernels::dequantize_weight_tile<float>>(dequantize_weight_tile) &&
                      enroll<&kernels::dequantize_weight_tile<bf16>>(dequantize_weight_tile) &&
                      enroll<&kernels::dequantize_weight<f16>>(dequantize_weight) &&
                      enroll<&kernels::dequantize_weight_tile<f16>>(dequantize_weight_tile);
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
