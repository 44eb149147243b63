// --optimizer-in-backward: the optimizer step runs inside the backward, a block at a time. Each block's
// gradients are a planned tensor (model/zero_schedule.h: BlockGradients) that this hook zeroes before the
// first op writing them and, after the last, sums over the data-parallel ranks (to the owner of each part,
// ZeRO-2 style, from ZeRO-1 on), updates this rank's part of the block from and lets go, so the gradients
// held at once are those of the blocks in flight. 8-bit
// moments' quantization blocks that straddle two blocks are updated from their carry once both are complete.
// Where the update needs the step's gradient norm first (clipping, fp16's overflow check), a first pass of
// the same graph only sums the blocks' squares. The per-element arithmetic is AdamW::step's. Under ZeRO-3
// a block's update writes this rank's shard of its weights after the block's last window, whose gathered copy
// no later op of the step reads.
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
  // `data_parallel`: the ranks whose gradients are summed, null for one. `gathers`: ZeRO-3's hooks that
  // gather each window's weights (parallel/zero_sync.h), run around this one's; null below stage 3.
  BackwardUpdate(AdamW& optimizer, Allocation& memory, const BackwardUpdates& updates, int num_ops,
                 Communicator* data_parallel, OpHooks* gathers = nullptr);

  // A pass that only sums the gradients' squares (norm()).
  void begin_norm_pass();
  // The pass of step `step` that updates at `lr`, the gradients times `grad_multiplier`: one update counted.
  void begin_update_pass(int64_t step, float lr, float grad_multiplier);
  // The norm of the last pass's gradients, as held (times the loss scale), every block's.
  double norm() const;

  void before(int op, bool training) override;
  void after(int op, bool training) override;
  void end_pass() override;

 private:
  // Sums the block's gradients (`grads`) over the data-parallel ranks: reduced to the rank owning each part
  // where the ranks shard the optimizer state (ZeRO-1 on), all-reduced whole without sharding and under
  // Adam-mini (every rank steps every block's v). Returns the block's sum of squares, every rank's part.
  double sum_over_ranks(const BlockGradients& block, char* grads);
  // After op `op`: the block whose gradients it completes summed and updated, with the carries it fills.
  void update_after(int op, bool training);
  // This rank's part of the flat range [begin, end), updated from its gradients at `grads` (element begin).
  void update(int64_t begin, int64_t end, const char* grads);
  // Copies the block's part of each quantization block it shares into that block's carry.
  void fill_carries(const BlockGradients& block, const char* grads);

  AdamW& optimizer_;
  Allocation& memory_;
  const BackwardUpdates& updates_;
  Communicator* data_parallel_;
  OpHooks* gathers_;
  std::vector<int> starting_, ending_;  // per op: the block whose gradients it starts (ends), or -1
  bool updating_ = false;
  int64_t step_ = 0;
  float lr_ = 0, grad_multiplier_ = 1;
  double sum_of_squares_ = 0;
};

}  // namespace mt
