// The data-parallel exchanges of one optimizer step under ZeRO. Stages 0 and 1 exchange whole buffers after
// the backward: gradients summed over the ranks (all of them at stage 0, this rank's shard at stage 1), and
// after the update every rank's shard of the weights copied to all, in chunks through the Plan's comm
// staging buffer. Stages 2 and 3 work a block at a time inside the step (model/zero_schedule.h): a window
// first gathers its block's weights (stage 3) and after its last op reduces the block's gradients to the
// ranks owning each part (stages 2 and 3). Every sum adds the ranks' parts in rank order.
#pragma once

#include <vector>

#include "dist/communicator.h"
#include "memory/allocation.h"
#include "model/executor.h"
#include "model/zero_schedule.h"

namespace mt {

class ZeroSync final : public OpHooks {
 public:
  ZeroSync(Communicator& comm, Allocation& memory, const ZeroSchedule& schedule);

  // Stage 0: every rank ends with the sum of all ranks' gradients. Stage 1: the plan's shard range of the
  // gradient buffer holds the sum (the rest of the buffer is left as it was). Stages 2 and 3: nothing, the
  // windows reduced the gradients already.
  void reduce_gradients();
  // The sum over ranks of one number per rank, added in rank order (the same bits on every rank).
  double sum(double local);
  // Stages 1 and 2, after the update: every rank's weight shard copied to all ranks. Stage 3 keeps shards.
  void gather_weights();

  // The windows of stages 2 and 3.
  void before(int op, bool training) override;
  void after(int op, bool training) override;

 private:
  // The part [begin, end) of a block's flat range that one rank owns.
  struct Part {
    int rank;
    int64_t begin, end;
  };
  struct BlockRange {
    int64_t begin = 0, end = 0;
    std::vector<Part> parts;
  };

  const Plan& plan() const { return memory_.plan(); }
  BlockRange block_range(const BlockWindow& window) const;
  void gather_block(const BlockWindow& window, const BlockRange& range);
  void start_gradients(const BlockWindow& window, const BlockRange& range);
  void reduce_block(const BlockWindow& window, const BlockRange& range);

  Communicator& comm_;
  Allocation& memory_;
  const ZeroSchedule& schedule_;
  std::vector<BlockRange> ranges_;  // per window
};

}  // namespace mt
