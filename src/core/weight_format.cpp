#include "core/weight_format.h"

namespace mt {

QuantizedWeight quantized_weight_at(WeightFormat format, int64_t n, bool double_quant, void* bytes) {
  const int64_t blocks = ceil_div(n, kWeightBlock);
  auto* floats = static_cast<float*>(bytes);
  if (!double_quant) {
    auto* codes = reinterpret_cast<uint8_t*>(floats + blocks);
    return {format, n, codes, floats, nullptr, nullptr, nullptr};
  }
  const int64_t groups = ceil_div(blocks, kAbsmaxBlock);
  auto* absmax_codes = reinterpret_cast<uint8_t*>(floats + groups + 1);
  return {format, n, absmax_codes + blocks, nullptr, absmax_codes, floats, floats + groups};
}

}  // namespace mt
