// The seam between the executor and a device's kernels: the Executor walks a Graph's ops, binding and
// releasing their tensors in an Allocation, runs the collectives itself (through the Communicator) and hands
// every other op to the Backend, one virtual call per op. A Backend is the run's Device (memory/device.h),
// whose memory the Allocation's buffers come from. The CPU's is backend/cpu/; devices/ chooses one. The
// operands and shapes every backend reads are resolved device-neutrally in exec/operands.h.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "memory/allocation.h"
#include "memory/device.h"
#include "model/graph.h"
#include "model/spec.h"

namespace mt {

// What one op's kernel reads besides the op: the model's sizes, the graph's table (shapes), the tensors
// bound for this op, and the pass.
struct OpRun {
  const ModelSpec& spec;
  const Graph& graph;
  const Allocation& memory;
  bool training;              // backward ops and the loss's gradients run only then
  float grad_scale;           // the factor parameter gradients are accumulated with (Executor::train_step)
  uint64_t first_sample = 0;  // the pass's first sample, numbered globally: keys LoRA dropout's masks
  // The targets the loss is a mean over: the step's (or the evaluation's) counted ones, as the loader counted
  // them, so no loss op reads a mask back. 0: the loss counts nothing (its loss is 0, with no gradient).
  int64_t loss_targets = 0;
  int tp = 1, tp_rank = 0;  // the tensor-parallel ranks the graph's split tensors are shared by
  // Tensor parallel: the split vocabulary's softmax all-gathers the ranks' row statistics (`floats` per rank,
  // this rank's at stats + tp_rank * floats) through this; empty with one rank.
  std::function<void(float* stats, int64_t floats)> gather_row_stats = {};
};

// The kinds the executor runs itself, through the communicator: a backend never sees them.
bool is_collective(OpKind kind);

class Backend : public Device {
 public:
  // Called before a pass's first op: the backend checks it can run the graph as planned (the CPU: OpenMP
  // runs no more threads than the scratch was sized for).
  virtual void begin_pass(const Graph& graph) = 0;
  // Runs op's kernel on its bound tensors. The loss op adds its mean over the counted targets into the
  // graph's loss scalar (Graph::loss_sum).
  virtual void run(const Op& op, const OpRun& run) = 0;
  // The LM head's logits for every position, [B*T, Vp] fp32 into host memory, from the head op's bound input.
  virtual void logits(const Op& head, const OpRun& run, float* host_out) = 0;
};

}  // namespace mt
