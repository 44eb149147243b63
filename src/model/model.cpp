#include "model/model.h"

#include "model/base_quant.h"
#include "model/gpt2.h"
#include "model/llama.h"

namespace mt {

ModelGraph build_model_graph(const ModelSpec& spec, const StepConfig& step) {
  ModelGraph model = spec.arch == Arch::llama ? build_llama_graph(spec, step) : build_gpt2_graph(spec, step);
  quantize_frozen_linears(spec, model, step.base_quant);
  return model;
}

ModelFamily model_family(const ModelSpec& spec) {
  return spec.arch == Arch::llama ? llama_family(spec) : gpt2_family(spec);
}

ModelGraph whole_model(const ModelSpec& spec, const LoraConfig& lora) {
  return build_model_graph(spec, {.batch = 1, .seq_len = 1, .lora = lora});
}

void init_model_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed) {
  if (spec.arch == Arch::llama)
    init_llama_params(spec, model, memory, seed);
  else
    init_gpt2_params(spec, model, memory, seed);
}

InitRule init_rule(const ModelSpec& spec, const TensorDesc& param) {
  return spec.arch == Arch::llama ? llama_init_rule(spec, param) : gpt2_init_rule(spec, param);
}

bool weight_decays(const TensorDesc& param) {
  return param.shape.size() == 2;
}

}  // namespace mt
