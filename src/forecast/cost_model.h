// Predicted step time of a planned run on a HardwareProfile. The graph's ops are what the step runs
// (recompute's re-run forward ops are ops of it too), and each is priced at the calibrated rate of the kernel
// that runs it: linear layers by their dtype, weight size and rows, the LM head, attention, norms and
// activations per element, the rest by operand bytes at the memory bandwidth. Then the gradients zeroed,
// AdamW over this rank's shard, the ZeRO stage's exchanges at the MPI bandwidth less the share that hides
// behind the kernels, and the offload file's traffic at the disk's. Under tensor parallelism the graph is one
// rank's (its heads, its columns and rows of the split weights), and its exchanges inside the ops (the
// all-reduce ops, the LM head's gather of row statistics) are priced at the same MPI bandwidth over the
// tensor group, all exposed: the next kernel needs their result; so are sequence parallelism's all-gathers
// and reduce-scatters. Under pipeline parallelism the graph is one
// stage's, with every micro-batch of the step: its sends and receives to the stages beside it are priced the
// same way, all exposed, and the pipeline's fill and drain idle the stage (P - 1) / m of its passes' time,
// so its step takes about (m + P - 1) / m of it: the bubble, (P - 1) / (m + P - 1) of the step.
#pragma once

#include <cstdint>

#include "forecast/hardware_profile.h"
#include "layout/run_layout.h"

namespace mt {

struct StepCost {
  double flops = 0;  // per optimizer step on this rank: matrix products and attention, recompute included
  double matmul_s = 0, attention_s = 0, elementwise_s = 0;  // all micro-batches of the step
  double optimizer_s = 0;
  double comm_s = 0;          // the ZeRO stage's exchanges over the data-parallel group, at the MPI bandwidth
  double comm_exposed_s = 0;  // the part the step waits for (all of it without --overlap-comm)
  double tp_comm_s = 0;       // the tensor-parallel exchanges inside the ops, all of it waited for
  // The pipeline's: the stage's sends and receives, and a tied embedding's gradient summed over the first and
  // last stage; all of it waited for.
  double pp_comm_s = 0;
  double bubble_s = 0;         // the stage idle while the pipeline fills and drains
  double bubble_fraction = 0;  // of the step: (P - 1) / (m + P - 1), 0 without pipeline parallelism
  double offload_s = 0;        // master weights and moments through the offload file
  double step_s = 0;           // the prediction
  double tokens_per_sec = 0;   // over all ranks
};

// One op's predicted time on one micro-batch: matrix products and attention by their FLOPs at the calibrated
// rates, tensor-parallel and pipeline exchanges by their bytes at the MPI bandwidth, every other op by its
// operand bytes at the memory bandwidth. `tp`: the tensor-parallel ranks the graph was built for
// (StepConfig::tp).
enum class OpCostKind { matmul, attention, elementwise };
struct OpCost {
  OpCostKind kind = OpCostKind::elementwise;
  double flops = 0;
  double seconds = 0;  // the whole op's
  double comm_s = 0;   // the part of seconds spent exchanging with the tensor group or the next stages
};
OpCost predict_op_cost(const TensorTable& table, const Op& op, const ModelSpec& spec,
                       const HardwareProfile& profile, int tp);

// What of a run, besides its ops and plan, its step's cost reads.
struct RunShape {
  int64_t accum = 1;         // micro-batches per step (RunLayout::accum)
  int64_t seq_len = 0;       // T
  int64_t graph_passes = 1;  // micro-batches one pass of the graph runs: a pipeline stage's all
  int pp = 1;                // pipeline stages
  // A pipeline stage's tied embedding, summed with the other end's; 0: none.
  int64_t tied_embedding_numel = 0;
};
RunShape run_shape(const RunLayout& run);

// predict_step_cost in two parts, for a search that prices many configurations of one graph: the ops of one
// pass of the graph (flops, the kernels' seconds by kind, the tensor-parallel and pipeline exchanges), then
// the step from them, the run's shape and one configuration's plan.
StepCost sum_op_costs(const Graph& graph, const ModelSpec& spec, const HardwareProfile& profile, int tp);
StepCost step_cost(const StepCost& ops, const RunShape& run, const Plan& plan, const TrainConfig& config,
                   int data_parallel, const HardwareProfile& profile);

// `data_parallel`: the ranks of the ZeRO group (the world over config.tensor_parallel and
// config.pipeline_parallel), each training its own micro-batches; config.tensor_parallel: the ranks sharing
// one micro-batch, whose graph (of one pipeline stage) `run` holds.
StepCost predict_step_cost(const RunLayout& run, const TrainConfig& config, int data_parallel,
                           const HardwareProfile& profile);

}  // namespace mt
