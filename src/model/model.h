// The model families behind one interface, chosen by ModelSpec::arch: the trainer and tools build, initialise
// and decay any model through these (weights.h loads and saves them).
#pragma once

#include <cstdint>

#include "memory/allocation.h"
#include "model/graph_builder.h"
#include "model/init.h"
#include "model/spec.h"
#include "model/transformer_graph.h"

namespace mt {

ModelGraph build_model_graph(const ModelSpec& spec, const StepConfig& step);
// The family's tensors and modules by Hugging Face name.
ModelFamily model_family(const ModelSpec& spec);

// The whole model as one process holds it, without tensor or pipeline parallelism, with LoRA's adapters
// when `lora` asks for them: the graph of the smallest step, for its table (what weight files and
// checkpoints list, in one process's flat order).
ModelGraph whole_model(const ModelSpec& spec, const LoraConfig& lora = {});

// The family's initialisation; a pure function of (seed, tensor name, element index).
void init_model_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed);
// The family's rule for one base parameter (init_params applies it, LoRA's adapters aside).
InitRule init_rule(const ModelSpec& spec, const TensorDesc& param);

// Parameters that get weight decay: matrices and embeddings, never biases or norm weights.
bool weight_decays(const TensorDesc& param);

}  // namespace mt
