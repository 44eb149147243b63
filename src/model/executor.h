// Runs a Graph's ops on an Allocation: each op binds its tensors in the arenas, calls its kernel, and
// releases the tensors whose lifetime ends there. The kernels are chosen once, from the dtypes of the
// weights (fp32, bf16, f16) and of the gradients (fp32, bf16).
#pragma once

#include <cstdint>

#include "memory/allocation.h"
#include "model/graph.h"
#include "model/spec.h"

namespace mt {

struct StepResult {
  double loss = 0;  // mean cross-entropy over the batch's positions
};

class Executor {
 public:
  Executor(const ModelSpec& spec, const Graph& graph, Allocation& memory);

  // Forward, loss and backward; parameter gradients are accumulated into memory.grads() scaled by grad_scale
  // (1 for one micro-batch; 1/k for k accumulated ones; times the loss scale under fp16).
  StepResult train_step(float grad_scale);
  // Forward and loss only.
  StepResult eval_step();
  // The forward pass's logits for the whole batch, [B*T, Vp] fp32 into the caller's buffer (tests, sampling).
  void forward_logits(float* logits);

 private:
  using RunOp = void (Executor::*)(const Op& op, bool training, float grad_scale, double& loss_sum);

  // Runs ops [0, end) with their tensors bound and released; returns the sum of per-position losses.
  double run_ops(int end, bool training, float grad_scale);
  double mean_loss(double loss_sum) const;
  // T: weights and activations; G: parameter gradients.
  template <typename T, typename G>
  void run(const Op& op, bool training, float grad_scale, double& loss_sum);
  template <typename T, typename G>
  void lm_head_loss(const Op& op, bool training, float grad_scale, double& loss_sum);
  template <typename T>
  void logits(const Op& head, float* out);

  const ModelSpec& spec_;
  const Graph& graph_;
  Allocation& memory_;
  RunOp run_op_;
  void (Executor::*logits_)(const Op& head, float* out);
};

}  // namespace mt
