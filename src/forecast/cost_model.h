// Predicted step time of a planned run on a HardwareProfile. The graph's ops are what the step runs
// (recompute's re-run forward ops are ops of it too), and each is priced at the calibrated rate of the kernel
// that runs it: linear layers by their dtype, weight size and rows, the LM head, attention, norms and
// activations per element, the rest by operand bytes at the memory bandwidth. Then the gradients zeroed,
// AdamW over this rank's shard, the ZeRO stage's exchanges at the MPI bandwidth less the share that hides
// behind the kernels, and the offload file's traffic at the disk's.
#pragma once

#include <cstdint>

#include "forecast/hardware_profile.h"
#include "train/run_layout.h"

namespace mt {

struct StepCost {
  double flops = 0;  // per optimizer step on this rank: matrix products and attention, recompute included
  double matmul_s = 0, attention_s = 0, elementwise_s = 0;  // all micro-batches of the step
  double optimizer_s = 0;
  double comm_s = 0;          // the exchanges' time at the MPI bandwidth
  double comm_exposed_s = 0;  // the part the step waits for (all of it without --overlap-comm)
  double offload_s = 0;       // master weights and moments through the offload file
  double step_s = 0;          // the prediction
  double tokens_per_sec = 0;  // over all ranks
};

// One op's predicted time on one micro-batch: matrix products and attention by their FLOPs at the calibrated
// rates, every other op by its operand bytes at the memory bandwidth.
enum class OpCostKind { matmul, attention, elementwise };
struct OpCost {
  OpCostKind kind = OpCostKind::elementwise;
  double flops = 0;
  double seconds = 0;
};
OpCost predict_op_cost(const TensorTable& table, const Op& op, const ModelSpec& spec,
                       const HardwareProfile& profile);

StepCost predict_step_cost(const RunLayout& run, const TrainConfig& config, int world,
                           const HardwareProfile& profile);

}  // namespace mt
