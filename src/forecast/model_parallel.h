// Pipeline parallelism as Megatron-LM lays it out, modelled on one rank's own graph (tensor and sequence
// parallelism, which the engine runs, already split it). The engine does not execute pipelines, so every
// number derived here is a model and is reported as "modelled": layers split evenly by stage, the embedding
// on the first, the final norm and head on the last (with its own copy of a tied embedding). Under 1F1B
// stage s holds the activations of min(pp - s, micro-batches) micro-batches at once: the first stage the
// most.
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

struct StageLayout {
  int stage = 0;
  Graph graph;                        // the stage's ops over its tensors
  Plan plan;                          // its activations include the micro-batches in flight
  int64_t in_flight = 1;              // 1F1B: micro-batches whose forward is done and backward is not
  int64_t saved_per_micro_batch = 0;  // activation bytes one micro-batch keeps from forward to backward
};

// The `pp` stages of the rank `run` lays out (a usage error for more stages than layers).
std::vector<StageLayout> plan_pipeline_stages(const RunLayout& run, int pp);

}  // namespace mt
