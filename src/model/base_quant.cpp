#include "model/base_quant.h"

#include <map>
#include <set>
#include <stdexcept>

#include "model/hf_tensors.h"

namespace mt {

std::string base_quant_text(const BaseQuantConfig& quant) {
  if (!quant.enabled()) return "";
  return "base " + std::string(kBaseQuantNames.name(quant.format)) + " (blocks of " +
         std::to_string(kWeightBlock) + ", absmax in " +
         (quant.double_quant ? "8 bits, blocks of " + std::to_string(kAbsmaxBlock) : std::string("fp32")) +
         ")";
}

void quantize_frozen_linears(const ModelSpec& spec, ModelGraph& model, const BaseQuantConfig& quant) {
  if (!quant.enabled()) return;
  TensorTable& table = model.graph.table;
  std::set<int> linear_weights;
  for (const Op& op : model.graph.ops)
    if (op.kind() == OpKind::linear) linear_weights.insert(op.as<ops::Linear>().weight);
  // Each weight's Hugging Face tensors by their first element.
  std::map<int, std::map<int64_t, int64_t>> parts;
  for (const FileTensor& f : hf_tensors(spec, model))
    if (linear_weights.contains(f.param) && table[f.param].category == Category::frozen)
      parts[f.param][f.offset] = f.numel();
  for (const auto& [id, by_offset] : parts) {
    QuantizedStorage storage{
        .format = quant.weight_format(), .double_quant = quant.double_quant, .parts = {}};
    int64_t next = 0;
    for (const auto& [offset, n] : by_offset) {
      if (offset != next) throw std::logic_error(table[id].name + ": its file tensors leave a gap");
      storage.parts.push_back(n);
      next += n;
    }
    if (next != table[id].numel())
      throw std::logic_error(table[id].name + ": its file tensors do not cover it");
    table[id].quantized = std::move(storage);
  }
}

}  // namespace mt
