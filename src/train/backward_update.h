// --optimizer-in-backward: the optimizer step runs inside the backward, a block at a time. Each block's
// gradients are a planned tensor (model/zero_schedule.h: BlockGradients) that this hook zeroes before the
// first op writing them and, after the last, sums over the data-parallel ranks, updates this rank's part of
// the block from and lets go, so the gradients held at once are those of the blocks in flight. 8-bit
// moments' quantization blocks that straddle two blocks are updated from their carry once both are complete.
// Where the update needs the step's gradient norm first (clipping, fp16's overflow check), a first pass of
// the same graph only sums the blocks' squares. The per-element arithmetic is AdamW::step's.
#pragma once

#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "exec/executor.h"
#include "memory/allocation.h"
#include "model/zero_schedule.h"
#include "optim/adamw.h"

namespace mt {

class BackwardUpdate final : public OpHooks {
 public:
  // `data_parallel`: the ranks whose gradients are summed, null for one.
  BackwardUpdate(AdamW& optimizer, Allocation& memory, const BackwardUpdates& updates, int num_ops,
                 Communicator* data_parallel);

  // A pass that only sums the gradients' squares (norm()).
  void begin_norm_pass();
  // The pass of step `step` that updates at `lr`, the gradients times `grad_multiplier`: one update counted.
  void begin_update_pass(int64_t step, float lr, float grad_multiplier);
  // The norm of the last pass's gradients, as held (times the loss scale), every block's.
  double norm() const;

  void before(int op, bool training) override;
  void after(int op, bool training) override;
  void end_pass() override {}

 private:
  // This rank's part of the flat range [begin, end), updated from its gradients at `grads` (element begin).
  void update(int64_t begin, int64_t end, const char* grads);
  // Copies the block's part of each quantization block it shares into that block's carry.
  void fill_carries(const BlockGradients& block, const char* grads);

  AdamW& optimizer_;
  Allocation& memory_;
  const BackwardUpdates& updates_;
  Communicator* data_parallel_;
  std::vector<int> starting_, ending_;  // per op: the block whose gradients it starts (ends), or -1
  bool updating_ = false;
  int64_t step_ = 0;
  float lr_ = 0, grad_multiplier_ = 1;
  double sum_of_squares_ = 0;
};

}  // namespace mt
