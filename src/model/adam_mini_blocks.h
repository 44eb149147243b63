// Adam-mini's partition of the parameters into blocks that share one second moment (Zhang et al. 2024,
// "Adam-mini: Use Fewer Learning Rates To Gain More", section 2.3 and Algorithm 3), built from the model's
// own tensors: the fused q/k/v projection split into q per query head, k per key/value head (GQA) and v per
// output neuron; the attention output and MLP weights per output neuron (a row of nn.Linear's [out, in], a
// column of Conv1D's [in, out]); the token (and position) embeddings and an untied head per token (row);
// every vector (norm weights, biases) one block. docs/optimizer_states.md says why.
#pragma once

#include <cstdint>
#include <vector>

#include "core/adamw_step.h"
#include "memory/tensor_table.h"
#include "model/spec.h"

namespace mt {

// The blocks of `params` (a whole model's, one process: no tensor or pipeline split), numbered in their
// order.
std::vector<MiniBlocks> adam_mini_blocks(const ModelSpec& spec, const TensorTable& table,
                                         const std::vector<int>& params);
// Their number (adam_mini_block_count of the above), without numbering each block's rows.
int64_t adam_mini_block_count(const ModelSpec& spec, const TensorTable& table,
                              const std::vector<int>& params);

}  // namespace mt
