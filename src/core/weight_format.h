// How a frozen base weight is stored in 4 or 8 bits (QLoRA's --base-quant): the formats, block sizes, the
// buffers of a quantized tensor and their bytes. Plans count these bytes and checkpoints of the base never
// hold them, but every device reads the same layout; the quantizer and the dequantizing products are each
// backend's (backend/cpu/weight_quant.h says what the codes mean).
#pragma once

#include <cstdint>
#include <span>

#include "core/int_math.h"

namespace mt {

enum class WeightFormat { nf4, int8 };

constexpr int64_t kWeightBlock = 64;   // elements per absmax (QLoRA's and bitsandbytes' 4-bit block)
constexpr int64_t kAbsmaxBlock = 256;  // absmaxes per second-level scale (double quantization)

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

}  // namespace mt
