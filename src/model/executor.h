// Runs a Graph's ops on an Allocation: each op binds its tensors in the arenas, calls its kernel, and
// releases the tensors whose lifetime ends there.
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
  Executor(const ModelSpec& spec, const Graph& graph, Allocation& memory)
      : spec_(spec), graph_(graph), memory_(memory) {}

  // Forward, loss and backward; parameter gradients are accumulated into memory.grads() scaled by grad_scale
  // (1 for one micro-batch; 1/k for k accumulated ones).
  StepResult train_step(float grad_scale);
  // Forward and loss only.
  StepResult eval_step();
  // The forward pass's logits for the whole batch, [B*T, Vp] into the caller's buffer (tests, sampling).
  void forward_logits(float* logits);

 private:
  // Runs ops [0, end) with their tensors bound and released; returns the sum of per-position losses.
  double run_ops(int end, bool training, float grad_scale);
  double mean_loss(double loss_sum) const;
  void run(const Op& op, bool training, float grad_scale, double& loss_sum);
  void lm_head_loss(const Op& op, bool training, float grad_scale, double& loss_sum);

  const ModelSpec& spec_;
  const Graph& graph_;
  Allocation& memory_;
};

}  // namespace mt
