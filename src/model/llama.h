// The LLaMA family (LLaMA 2/3, Mistral, Qwen2) as a Graph: RMSNorm, rotary embeddings on q and k,
// grouped-query attention, SwiGLU MLP, no biases (Qwen2: on q, k, v), tied or untied LM head. Weights are
// kept in torch.nn.Linear layout [out, in] under Hugging Face names, with two fusions: self_attn.qkv_proj is
// q_proj, k_proj and v_proj stacked by rows, mlp.gate_up_proj is gate_proj and up_proj (model/hf_tensors.h
// names each part).
#pragma once

#include <cstdint>

#include "memory/allocation.h"
#include "model/init.h"
#include "model/spec.h"
#include "model/transformer_graph.h"

namespace mt {

ModelFamily llama_family(const ModelSpec& spec);
ModelGraph build_llama_graph(const ModelSpec& spec, const StepConfig& step);

// Hugging Face's LLaMA initialisation: every matrix N(0, 0.02), RMSNorm weights 1, biases 0; padded
// vocabulary rows stay zero.
InitRule llama_init_rule(const ModelSpec& spec, const TensorDesc& t);
void init_llama_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed);

}  // namespace mt
