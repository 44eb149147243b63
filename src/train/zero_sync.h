// The data-parallel exchanges of one optimizer step under ZeRO: gradients summed over the ranks (all of them
// at stage 0, this rank's shard from stage 1), per-rank partial sums added in rank order, and after the
// update every rank's shard of the weights copied to all. Collectives run in chunks through the Plan's comm
// staging buffer, so no buffer grows with the model.
#pragma once

#include "dist/communicator.h"
#include "memory/allocation.h"

namespace mt {

class ZeroSync {
 public:
  ZeroSync(Communicator& comm, const Allocation& memory) : comm_(comm), memory_(memory) {}

  // Stage 0: every rank ends with the sum of all ranks' gradients. Stage >= 1: the plan's shard range of the
  // gradient buffer holds the sum (the rest of the buffer is left as it was).
  void reduce_gradients();
  // The sum over ranks of one number per rank, added in rank order (the same bits on every rank).
  double sum(double local);
  // Stage >= 1, after the update: every rank's weight shard copied to all ranks.
  void gather_weights();

 private:
  const Plan& plan() const { return memory_.plan(); }

  Communicator& comm_;
  const Allocation& memory_;
};

}  // namespace mt
