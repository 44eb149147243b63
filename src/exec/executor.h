// Runs a Graph's ops on an Allocation: each op binds its tensors in the arenas, has the backend run its
// kernel (exec/backend.h) or runs its collective through the communicator, and releases the tensors whose
// lifetime ends there.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "dist/communicator.h"
#include "exec/backend.h"
#include "memory/allocation.h"
#include "model/graph.h"
#include "model/spec.h"

namespace mt {

// Work done around an op's kernel that is not the kernel: ZeRO's gathers and reductions of a block. before()
// runs once the op's tensors are bound, after() before the tensors it was the last to use are released, and
// end_pass() when a pass (training step or evaluation) has run its last op, before the arenas are reset.
class OpHooks {
 public:
  virtual ~OpHooks() = default;
  virtual void before(int op, bool training) = 0;
  virtual void after(int op, bool training) = 0;
  virtual void end_pass() = 0;
};

class Executor {
 public:
  // `memory`'s buffers must be `backend`'s (Allocation::device).
  Executor(const ModelSpec& spec, const Graph& graph, Allocation& memory, Backend& backend);

  // Forward, loss and backward; parameter gradients are accumulated into memory.grads() scaled by grad_scale
  // (1, times the loss scale under fp16). `first_sample` is the global number of the pass's first sample:
  // dropout's masks follow the samples, so they repeat on a resume however the step is split. The loss is a
  // mean over `step_targets`: every counted target of the step, on every micro-batch and data-parallel rank
  // (Loader::count_targets), so a step means the same however it is split.
  void train_step(float grad_scale, uint64_t first_sample, int64_t step_targets);
  // Forward and loss only, the loss a mean over `targets`: every counted target of the evaluation.
  void eval_step(int64_t targets);
  // The loss scalar (Graph::loss_sum): each pass's loss ops add their targets' losses over the mean's
  // divisor into it, so it holds the mean so far since clear_loss(), read once (a pipeline stage without the
  // head: 0).
  void clear_loss();
  double loss() const;
  // The forward pass's logits for the whole batch, [B*T, Vp] fp32 into the caller's host buffer (tests).
  void forward_logits(float* logits);
  // Called with each op's index after its kernel ran and before the tensors it was the last to use are
  // released: the moment its inputs, outputs and scratch are all held. An empty function turns it off.
  void set_op_observer(std::function<void(int op)> observer) { observer_ = std::move(observer); }
  // Null: no hooks. The hooks must outlive the executor's runs.
  void set_op_hooks(OpHooks* hooks) { hooks_ = hooks; }
  // Tensor parallel: the group the graph's ops are split over (StepConfig::tp); it must outlive the runs.
  void set_tensor_group(Communicator* group) { tensor_group_ = group; }
  // Pipeline parallel: the stages the graph's exchanges go to (StepConfig::pp); it must outlive the runs.
  void set_pipeline(Communicator* pipeline) { pipeline_ = pipeline; }

 private:
  // Runs ops [0, end) with their tensors bound and released.
  void run_ops(int end, bool training, float grad_scale, uint64_t first_sample, int64_t loss_targets);
  // An all-reduce, all-gather, reduce-scatter or pipeline exchange, over its group.
  void run_collective(const Op& op);
  // The checks that the graph was made for this process's groups.
  void check_groups() const;
  OpRun op_run(bool training, float grad_scale, uint64_t first_sample, int64_t loss_targets) const;
  Communicator& tensor_group(const Op& op) const;

  const ModelSpec& spec_;
  const Graph& graph_;
  Allocation& memory_;
  Backend& backend_;
  std::function<void(int op)> observer_;
  OpHooks* hooks_ = nullptr;
  Communicator* tensor_group_ = nullptr;
  Communicator* pipeline_ = nullptr;
};

}  // namespace mt
