// QLoRA's base (Dettmers et al., 2023): with --base-quant, LoRA's frozen linear weights are stored
// block-quantized (backend/cpu/weight_quant.h), each Hugging Face tensor of a fused weight on its own, and
// dequantized tile by tile inside the products. Norms, embeddings and the head stay in the run's dtype, as
// bitsandbytes leaves them.
#pragma once

#include <string>

#include "core/names.h"
#include "core/weight_format.h"

namespace mt {

struct ModelGraph;
struct ModelSpec;

enum class BaseQuant { none, nf4, int8 };
inline constexpr auto kBaseQuantNames = names_in_order<BaseQuant>("none", "nf4", "int8");

struct BaseQuantConfig {
  BaseQuant format = BaseQuant::none;
  bool double_quant = true;  // the absmaxes in 8 bits (bitsandbytes' bnb_4bit_use_double_quant)

  bool enabled() const { return format != BaseQuant::none; }
  WeightFormat weight_format() const {
    return format == BaseQuant::int8 ? WeightFormat::int8 : WeightFormat::nf4;
  }
};

// How the base is stored, for banners: "base nf4 (blocks of 64, absmax in 8 bits)"; empty without.
std::string base_quant_text(const BaseQuantConfig& quant);

// Marks every frozen weight of a linear op as quantized (TensorDesc::quantized), in parts that are its
// Hugging Face tensors in stored order. The graph's linear ops already carry their dequantization tiles
// (GraphBuilder::linear, from the same config).
void quantize_frozen_linears(const ModelSpec& spec, ModelGraph& model, const BaseQuantConfig& quant);

}  // namespace mt
