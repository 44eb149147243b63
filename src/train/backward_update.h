// --optimizer-in-backward: the optimizer step runs inside the backward, a block at a time. Each block's
// gradients are a planned tensor (model/zero_schedule.h: BlockGradients) that this hook zeroes before the
// first op writing them and, after the last, updates the block from and lets go, so the gradients held at
// once are those of the blocks in flight. 8-bit moments' quantization blocks that straddle two blocks are
// updated from their carry once both are complete. The per-element arithmetic is AdamW::step's.
#pragma once

#include <cstdint>
#include <vector>

#include "exec/executor.h"
#include "memory/allocation.h"
#include "model/zero_schedule.h"
#include "optim/adamw.h"

namespace mt {

class BackwardUpdate final : public OpHooks {
 public:
  BackwardUpdate(AdamW& optimizer, Allocation& memory, const BackwardUpdates& updates, int num_ops);

  // Before step `step`'s pass, at learning rate `lr`: one update counted.
  void begin_step(int64_t step, float lr);
  // After the pass: the norm of the step's gradients (every block's, as the blocks were updated).
  OptimizerStepResult end_step() const;

  void before(int op, bool training) override;
  void after(int op, bool training) override;
  void end_pass() override {}

 private:
  // The flat range [begin, end) updated from its gradients at `grads` (element begin).
  void update(int64_t begin, int64_t end, const void* grads);

  AdamW& optimizer_;
  Allocation& memory_;
  const BackwardUpdates& updates_;
  std::vector<int> starting_, ending_;  // per op: the block whose gradients it starts (ends), or -1
  int64_t step_ = 0;
  float lr_ = 0;
  double sum_of_squares_ = 0;
};

}  // namespace mt
