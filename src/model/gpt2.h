// GPT-2 as a Graph: its parameters (Hugging Face names), the activations it keeps for backward, the workspace
// of its kernels, and the ops of one training step: forward, fused LM head + loss, backward.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/allocation.h"
#include "model/init.h"
#include "model/spec.h"
#include "model/transformer_graph.h"

namespace mt {

ModelFamily gpt2_family(const ModelSpec& spec);
ModelGraph build_gpt2_graph(const ModelSpec& spec, const StepConfig& step);

// GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1.
// Padded vocabulary rows stay zero.
InitRule gpt2_init_rule(const ModelSpec& spec, const TensorDesc& t);
void init_gpt2_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed);

}  // namespace mt
