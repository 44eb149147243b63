// The model families behind one interface, chosen by ModelSpec::arch: the trainer and tools build, initialise
// and decay any model through these (weights.h loads and saves them).
#pragma once

#include <cstdint>

#include "memory/allocation.h"
#include "model/graph_builder.h"
#include "model/init.h"
#include "model/spec.h"

namespace mt {

ModelGraph build_model_graph(const ModelSpec& spec, const StepConfig& step);

// The family's initialisation; a pure function of (seed, tensor name, element index).
void init_model_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed);
// The family's rule for one base parameter (init_params applies it, LoRA's adapters aside).
InitRule init_rule(const ModelSpec& spec, const TensorDesc& param);

// Parameters that get weight decay: matrices and embeddings, never biases or norm weights.
bool weight_decays(const TensorDesc& param);

}  // namespace mt
