// The data-parallel exchanges of one optimizer step under ZeRO, run on the AsyncCommunicator's worker so
// that they overlap the kernels. The step's ops run in block windows (model/zero_schedule.h):
//   stages 0, 1  after a block's last window of the step's final micro-batch, its gradients are summed over
//                the ranks (stage 0, and stage 1 under Adam-mini: all-reduced; stage 1: reduced to the rank
//                owning each part), while the backward of earlier blocks goes on;
//   stages 2, 3  every window sums its gradients in a comm tensor whose owned parts start from the shard's
//                running sum, reduced to the owners during the next window;
//   stage 3      a window's block of weights is gathered from their owners during the window before.
// After the update, stages 1 and 2 copy every rank's shard of the weights to all ranks. Every sum adds the
// ranks' parts in rank order, so runs repeat bitwise.
#pragma once

#include <vector>

#include "dist/async_communicator.h"
#include "exec/executor.h"
#include "memory/allocation.h"
#include "model/zero_schedule.h"

namespace mt {

class ZeroSync final : public OpHooks {
 public:
  // Without overlap every exchange is waited for as soon as it starts, as on a machine with no core to spare.
  ZeroSync(AsyncCommunicator& comm, Allocation& memory, const ZeroSchedule& schedule, bool overlap);

  // Whether the micro-batch about to run is the step's last: stages 0 and 1 exchange gradients only then.
  void set_final_micro_batch(bool final) { final_micro_batch_ = final; }
  // Stages 0 and 1 run without the op hooks (pipeline parallel, whose tied embedding sums its gradient over
  // the stages first): starts every block's gradient reduction at once, for reduce_gradients to wait for.
  void start_block_reductions();
  // Waits until this rank's gradient range holds the sum over ranks: all of the buffer at stage 0 (and at
  // stage 1 under Adam-mini), this rank's shard from stage 1 on (the rest of the buffer is left as it was).
  void reduce_gradients();
  // The sum over ranks of one number per rank, added in rank order (the same bits on every rank).
  double sum(double local);
  // values[0, n) summed over the ranks in place, in rank order (the same bits on every rank).
  void sum(double* values, int64_t n);
  // Stages 1 and 2, after the update: every rank's weight shard copied to all ranks. Stage 3 keeps shards.
  void gather_weights();

  void before(int op, bool training) override;
  void after(int op, bool training) override;
  void end_pass() override;

  // Seconds this thread waited for exchanges since the last call: the communication the kernels did not hide.
  double take_exposed_seconds();

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
  // Each queues the window's exchange on the worker and returns its ticket (0 when already waited for).
  template <typename Exchange>
  AsyncCommunicator::Ticket start_parts(int window, int block_id, DType dtype, char* shard,
                                        int64_t shard_begin, Exchange exchange);
  AsyncCommunicator::Ticket start_gather(int window);
  AsyncCommunicator::Ticket start_reduce(int window);
  AsyncCommunicator::Ticket start_whole_block_reduce(int window);
  void start_gradients(int window);
  void wait(AsyncCommunicator::Ticket& ticket);
  // The ticket of work just started, or 0 after waiting for it when exchanges do not overlap.
  AsyncCommunicator::Ticket started(AsyncCommunicator::Ticket ticket);

  AsyncCommunicator& comm_;
  Allocation& memory_;
  const ZeroSchedule& schedule_;
  bool overlap_;
  std::vector<BlockRange> ranges_;  // per window
  // Per window: the pending gather of its weights (stage 3) and reduction of its gradients (stages 2, 3).
  std::vector<AsyncCommunicator::Ticket> gathers_, reductions_;
  bool final_micro_batch_ = true;
  double exposed_seconds_ = 0;
};

}  // namespace mt
