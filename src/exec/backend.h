// The seam between the executor and a device: the Executor walks a Graph's ops, binding and releasing their
// tensors in an Allocation; a Backend runs one op's kernel on them, one virtual call per op. Today's one is
// the CPU's: its kernels in backend/cpu/, its op runner exec/cpu_backend.cpp. An accelerator's is a sibling:
// its kernels in backend/<device>/, its op runner beside cpu_backend.cpp, and its DeviceAllocator
// (memory/device_allocator.h) under the Allocation, so that the tensors the ops are handed live in its
// memory.
#pragma once

#include <cstdint>
#include <string_view>

#include "dist/communicator.h"
#include "memory/allocation.h"
#include "model/graph.h"
#include "model/spec.h"

namespace mt {

// What one op's kernel reads besides the op: the model's sizes, the graph's table (shapes), the tensors
// bound for this op, and the pass.
struct OpRun {
  const ModelSpec& spec;
  const Graph& graph;
  const Allocation& memory;
  bool training;      // backward ops and the loss's gradients run only then
  float grad_scale;   // the factor parameter gradients are accumulated with (Executor::train_step)
  uint64_t draw = 0;  // the run's micro-batch number (Executor::train_step): keys LoRA dropout's masks
  // Tensor parallel: the ranks that share each op (ops::AllReduce, the split vocabulary's softmax); null
  // with one.
  Communicator* tensor_group = nullptr;
  // Pipeline parallel: the stages, ranked by stage (ops::PipeExchange); null with one.
  Communicator* pipeline = nullptr;
  int tp() const { return tensor_group ? tensor_group->size() : 1; }
};

// The targets the loss op counts: those its loss mask marks, or all of them without one.
int64_t counted_targets(const ops::LmHeadLoss& head, const TensorTable& table, const Allocation& memory);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Runs op's kernel on its bound tensors: the loss op returns the sum of its per-position losses, every
  // other op 0.
  virtual double run(const Op& op, const OpRun& run) = 0;
  // The LM head's logits for every position, [B*T, Vp] fp32 into out, from the head op's bound input.
  virtual void logits(const Op& head, const OpRun& run, float* out) = 0;
};

}  // namespace mt
