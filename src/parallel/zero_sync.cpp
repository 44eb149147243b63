#include "parallel/zero_sync.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "parallel/parallel_groups.h"

namespace mt {

namespace {

char* bytes(void* p) {
  return static_cast<char*>(p);
}

// Adds the seconds of its scope to a counter.
class ScopeTimer {
 public:
  explicit ScopeTimer(double& seconds) : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}
  ~ScopeTimer() {
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double& seconds_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

ZeroSync::ZeroSync(AsyncCommunicator& comm, Allocation& memory, const ZeroSchedule& schedule, bool overlap)
    : comm_(comm),
      memory_(memory),
      schedule_(schedule),
      overlap_(overlap),
      gathers_(schedule.windows.size(), 0),
      reductions_(schedule.windows.size(), 0) {
  for (const BlockWindow& window : schedule.windows) ranges_.push_back(block_range(window));
}

ZeroSync::BlockRange ZeroSync::block_range(const BlockWindow& window) const {
  const TensorTable& table = memory_.table();
  BlockRange range;
  range.begin = memory_.param_offset(window.params.front());
  range.end = range.begin;
  for (int id : window.params) {
    if (memory_.param_offset(id) != range.end)
      throw std::logic_error("zero sync: block " + std::to_string(window.block) + " is not one flat range");
    range.end += table[id].numel();
  }
  const Plan& p = plan();
  for (int r = 0; r < p.sharding.dp; ++r) {
    const int64_t begin = std::max(range.begin, r * p.shard_elems);
    const int64_t end = std::min({range.end, (r + 1) * p.shard_elems, p.num_params});
    if (begin < end) range.parts.push_back({r, begin, end});
  }
  return range;
}

void ZeroSync::wait(AsyncCommunicator::Ticket& ticket) {
  if (ticket == 0) return;
  const ScopeTimer timer(exposed_seconds_);
  comm_.wait(ticket);
  ticket = 0;
}

AsyncCommunicator::Ticket ZeroSync::started(AsyncCommunicator::Ticket ticket) {
  if (!overlap_) wait(ticket);
  return ticket;
}

double ZeroSync::take_exposed_seconds() {
  const double seconds = exposed_seconds_;
  exposed_seconds_ = 0;
  return seconds;
}

void ZeroSync::before(int op, bool training) {
  const int w = schedule_.window_of_op[op];
  if (w < 0 || op != schedule_.windows[w].first_op) return;
  const BlockWindow& window = schedule_.windows[w];
  const int windows = static_cast<int>(schedule_.windows.size());
  if (window.weights >= 0) {
    if (gathers_[w] == 0) gathers_[w] = start_gather(w);  // the pass's first window: nothing prefetched it
    wait(gathers_[w]);
    if (overlap_ && w + 1 < windows) gathers_[w + 1] = start_gather(w + 1);  // its tensor is live from now on
  }
  // The previous window's reduction had this window to run; its gradient tensor ends with this window.
  if (training && window.grads >= 0) start_gradients(w);
}

void ZeroSync::after(int op, bool training) {
  const int w = schedule_.window_of_op[op];
  if (w < 0 || op != schedule_.windows[w].last_op) return;
  const BlockWindow& window = schedule_.windows[w];
  if (w > 0) wait(reductions_[w - 1]);  // its gradient tensor is released with this op
  if (!training) return;
  if (window.grads >= 0) {
    reductions_[w] = start_reduce(w);
    if (w + 1 == static_cast<int>(schedule_.windows.size())) wait(reductions_[w]);  // no next window
  } else if (schedule_.stage < 2 && window.last_grads_of_block && final_micro_batch_) {
    start_whole_block_reduce(w);  // waited for by reduce_gradients()
  }
}

void ZeroSync::end_pass() {
  // An evaluation stops at the loss: a prefetch may still be writing into a tensor the arenas release now.
  for (AsyncCommunicator::Ticket& t : gathers_) wait(t);
  for (AsyncCommunicator::Ticket& t : reductions_) wait(t);
}

// Queues `exchange(c, block part, this rank's shard part or null, elements, owner)` for each part of window
// w's block tensor `block_id` of `dtype`, whose shard on this rank starts at element `shard_begin` of
// `shard`.
template <typename Exchange>
AsyncCommunicator::Ticket ZeroSync::start_parts(int w, int block_id, DType dtype, char* shard,
                                                int64_t shard_begin, Exchange exchange) {
  const BlockRange& range = ranges_[w];
  char* block = bytes(memory_.data(block_id));
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  const int rank = plan().sharding.dp_rank;
  return started(comm_.start([=, &range](Communicator& c) {
    for (const Part& part : range.parts) {
      char* own = part.rank == rank ? shard + (part.begin - shard_begin) * size : nullptr;
      exchange(c, block + (part.begin - range.begin) * size, own, part.end - part.begin, size, dtype,
               part.rank);
    }
  }));
}

// Each part comes from the rank whose weight shard holds it.
AsyncCommunicator::Ticket ZeroSync::start_gather(int w) {
  const Plan& p = plan();
  return start_parts(w, schedule_.windows[w].weights, p.policy.weights, bytes(memory_.params()),
                     p.weights_begin(),
                     [&device = memory_.device()](Communicator& c, char* dst, const char* own, int64_t n,
                                                  int64_t size, DType dtype, int owner) {
                       if (own) device.copy(dst, own, n * size);
                       c.broadcast(dst, n, dtype, owner);
                     });
}

// The window's kernels add into its gradient tensor. Starting this rank's own part from its shard's running
// sum (earlier micro-batches, earlier windows of the block) and the rest from zero makes the reduction the
// new running sum.
void ZeroSync::start_gradients(int w) {
  const BlockRange& range = ranges_[w];
  const Plan& p = plan();
  const int64_t size = static_cast<int64_t>(dtype_size(p.policy.grads));
  char* block = bytes(memory_.data(schedule_.windows[w].grads));
  Device& device = memory_.device();
  device.zero(block, (range.end - range.begin) * size);
  for (const Part& part : range.parts)
    if (part.rank == p.sharding.dp_rank)
      device.copy(block + (part.begin - range.begin) * size, memory_.grads_at(part.begin),
                  (part.end - part.begin) * size);
}

// Each part is summed into the shard of the rank that owns it.
AsyncCommunicator::Ticket ZeroSync::start_reduce(int w) {
  const Plan& p = plan();
  return start_parts(w, schedule_.windows[w].grads, p.policy.grads, bytes(memory_.grads()), p.grads_begin(),
                     [](Communicator& c, char* send, char* own, int64_t n, int64_t /*size*/, DType dtype,
                        int owner) { c.reduce_sum(send, own ? own : send, n, dtype, owner); });
}

// Stages 0 and 1 keep whole gradient buffers: a block's range is summed in place, in chunks of the bucket.
AsyncCommunicator::Ticket ZeroSync::start_whole_block_reduce(int w) {
  const BlockRange& range = ranges_[w];
  const Plan& p = plan();
  const DType dtype = p.policy.grads;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  const int64_t bucket = std::max<int64_t>(p.sharding.bucket_elems, 1);
  char* grads = bytes(memory_.grads());
  // Adam-mini steps every block's v on every rank: at ZeRO-1 too each rank needs all the summed gradients.
  const bool all_reduce = !p.reduces_grads_to_owners();
  return started(comm_.start([=, &range](Communicator& c) {
    for (const Part& part : range.parts) {
      for (int64_t b = part.begin; b < part.end; b += bucket) {
        char* data = grads + b * size;
        const int64_t n = std::min(bucket, part.end - b);
        if (all_reduce)
          c.all_reduce_sum(data, n, dtype);
        else
          c.reduce_sum(data, data, n, dtype, part.rank);
      }
    }
  }));
}

void ZeroSync::start_block_reductions() {
  if (schedule_.stage >= 2) throw std::logic_error("zero sync: stage 2 and 3 reduce in their windows");
  for (int w = 0; w < static_cast<int>(schedule_.windows.size()); ++w)
    if (schedule_.windows[w].last_grads_of_block) start_whole_block_reduce(w);
}

void ZeroSync::reduce_gradients() {
  const ScopeTimer timer(exposed_seconds_);
  comm_.wait_all();
}

double ZeroSync::sum(double local) {
  const ScopeTimer timer(exposed_seconds_);
  return sum_over_ranks(comm_, local);
}

void ZeroSync::sum(double* values, int64_t n) {
  const ScopeTimer timer(exposed_seconds_);
  comm_.wait(comm_.start([=](Communicator& c) { c.all_reduce_sum(values, n, DType::f64); }));
}

// Every rank's shard, broadcast from its owner in place, in chunks of the bucket.
void ZeroSync::gather_weights() {
  const Plan& p = plan();
  if (!p.sharding.shards_optimizer() || p.sharding.shards_weights()) return;
  const ScopeTimer timer(exposed_seconds_);
  const DType dtype = p.policy.weights;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  const int64_t bucket = std::max<int64_t>(p.sharding.bucket_elems, 1);
  char* weights = bytes(memory_.params());
  for (int r = 0; r < p.sharding.dp; ++r) {
    const int64_t begin = std::min(r * p.shard_elems, p.num_params);
    const int64_t end = std::min(begin + p.shard_elems, p.num_params);
    for (int64_t b = begin; b < end; b += bucket)
      comm_.broadcast(weights + b * size, std::min(bucket, end - b), dtype, r);
  }
}

}  // namespace mt
