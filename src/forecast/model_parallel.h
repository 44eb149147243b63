// Tensor and pipeline parallelism as Megatron-LM lays them out, modelled on the run's own TensorTable. The
// engine does not execute either, so every number derived here is a model and is reported as "modelled".
//   tensor parallel (tp ranks): column-parallel linears (q/k/v, the MLP's first product) and row-parallel
//     ones (attention output, the MLP's second product) hold 1/tp of their weights, as do the
//     vocabulary-parallel embedding and head; norms, positions and row-parallel biases are replicated. The
//     activations between a column- and a row-parallel product (q/k/v, attention output and statistics, the
//     MLP's hidden activations, their gradients) and the logits chunk are split too; the rest is replicated
//     (no sequence parallelism).
//   pipeline parallel (pp stages): layers split evenly by stage, the embedding on the first, the final norm
//     and head on the last (with its own copy of a tied embedding). Under 1F1B stage s holds the activations
//     of min(pp - s, micro-batches) micro-batches at once: the first stage the most.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/plan.h"
#include "model/graph.h"
#include "train/run_layout.h"

namespace mt {

struct ModelParallel {
  int tp = 1, pp = 1;
};

// Whether Megatron's tensor parallelism gives each rank 1/tp of this tensor.
bool split_by_tensor_parallel(const TensorDesc& tensor);

struct StageLayout {
  int stage = 0;
  Graph graph;                        // the stage's ops over its tensors, 1/tp of the split ones
  Plan plan;                          // its activations include the micro-batches in flight
  int64_t in_flight = 1;              // 1F1B: micro-batches whose forward is done and backward is not
  int64_t saved_per_micro_batch = 0;  // activation bytes one micro-batch keeps from forward to backward
};

// The stages of one tensor-parallel rank (all hold the same) of data-parallel rank `run.plan.sharding.rank`.
// Usage errors for layouts Megatron refuses (tp not dividing the heads, more stages than layers).
std::vector<StageLayout> plan_model_parallel(const RunLayout& run, const ModelParallel& mp);

}  // namespace mt
