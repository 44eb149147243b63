#include "train/zero_sync.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace mt {

namespace {

char* bytes(void* p) {
  return static_cast<char*>(p);
}

}  // namespace

ZeroSync::ZeroSync(Communicator& comm, Allocation& memory, const ZeroSchedule& schedule)
    : comm_(comm), memory_(memory), schedule_(schedule) {
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
  for (int r = 0; r < p.sharding.world; ++r) {
    const int64_t begin = std::max(range.begin, r * p.shard_elems);
    const int64_t end = std::min({range.end, (r + 1) * p.shard_elems, p.num_params});
    if (begin < end) range.parts.push_back({r, begin, end});
  }
  return range;
}

void ZeroSync::before(int op, bool training) {
  const int w = schedule_.window_of_op[op];
  if (w < 0 || op != schedule_.windows[w].first_op) return;
  const BlockWindow& window = schedule_.windows[w];
  const BlockRange& range = ranges_[w];
  if (window.weights >= 0) gather_block(window, range);
  const bool grads = training && window.grads >= 0;
  if (grads) start_gradients(window, range);
  memory_.bind_block(range.begin, range.end, window.weights >= 0 ? memory_.data(window.weights) : nullptr,
                     grads ? memory_.data(window.grads) : nullptr);
}

void ZeroSync::after(int op, bool training) {
  const int w = schedule_.window_of_op[op];
  if (w < 0 || op != schedule_.windows[w].last_op) return;
  const BlockWindow& window = schedule_.windows[w];
  if (training && window.grads >= 0) reduce_block(window, ranges_[w]);
  memory_.bind_block(0, 0, nullptr, nullptr);
}

// Each part comes from the rank whose weight shard holds it.
void ZeroSync::gather_block(const BlockWindow& window, const BlockRange& range) {
  const Plan& p = plan();
  const DType dtype = p.policy.weights;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  char* block = bytes(memory_.data(window.weights));
  for (const Part& part : range.parts) {
    char* dst = block + (part.begin - range.begin) * size;
    if (part.rank == p.sharding.rank)
      std::memcpy(dst, bytes(memory_.params()) + (part.begin - p.weights_begin()) * size,
                  (part.end - part.begin) * size);
    comm_.broadcast(dst, part.end - part.begin, dtype, part.rank);
  }
}

// The window's kernels add into its gradient tensor. Starting this rank's own part from its shard's running
// sum (earlier micro-batches, earlier windows of the block) and the rest from zero makes the reduction
// below the new running sum.
void ZeroSync::start_gradients(const BlockWindow& window, const BlockRange& range) {
  const Plan& p = plan();
  const int64_t size = static_cast<int64_t>(dtype_size(p.policy.grads));
  char* block = bytes(memory_.data(window.grads));
  std::memset(block, 0, (range.end - range.begin) * size);
  for (const Part& part : range.parts)
    if (part.rank == p.sharding.rank)
      std::memcpy(block + (part.begin - range.begin) * size,
                  bytes(memory_.grads()) + (part.begin - p.grads_begin()) * size,
                  (part.end - part.begin) * size);
}

void ZeroSync::reduce_block(const BlockWindow& window, const BlockRange& range) {
  const Plan& p = plan();
  const DType dtype = p.policy.grads;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  char* block = bytes(memory_.data(window.grads));
  for (const Part& part : range.parts) {
    char* send = block + (part.begin - range.begin) * size;
    char* recv =
        part.rank == p.sharding.rank ? bytes(memory_.grads()) + (part.begin - p.grads_begin()) * size : send;
    comm_.reduce_sum(send, recv, part.end - part.begin, dtype, part.rank);
  }
}

void ZeroSync::reduce_gradients() {
  const Plan& p = plan();
  if (p.sharding.world == 1 || p.sharding.shards_grads()) return;
  const DType dtype = p.policy.grads;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype)), n = p.num_params;
  char* grads = bytes(memory_.grads());
  if (!p.sharding.shards_optimizer()) {
    const int64_t bucket = p.chunk_elems * p.sharding.world;
    for (int64_t off = 0; off < n; off += bucket)
      comm_.all_reduce_sum(grads + off * size, std::min(bucket, n - off), dtype);
    return;
  }
  // Chunk j of every rank's shard is packed side by side, zero past the last parameter, then
  // reduce-scattered: this rank receives the sum of its own chunk j.
  const int world = p.sharding.world, rank = p.sharding.rank;
  const int64_t S = p.shard_elems, c = p.chunk_elems;
  char* staging = bytes(memory_.comm_staging());
  char* recv = staging + world * c * size;
  for (int64_t j0 = 0; j0 < S; j0 += c) {
    const int64_t cj = std::min(c, S - j0);
    for (int r = 0; r < world; ++r) {
      const int64_t first = r * S + j0, avail = std::clamp<int64_t>(n - first, 0, cj);
      char* dst = staging + r * cj * size;
      if (avail > 0) std::memcpy(dst, grads + first * size, avail * size);
      std::memset(dst + avail * size, 0, (cj - avail) * size);
    }
    comm_.reduce_scatter_sum(staging, recv, cj, dtype);
    const int64_t first = rank * S + j0, avail = std::clamp<int64_t>(n - first, 0, cj);
    if (avail > 0) std::memcpy(grads + first * size, recv, avail * size);
  }
}

double ZeroSync::sum(double local) {
  std::vector<double> all(plan().sharding.world);
  comm_.all_gather(&local, all.data(), 1, DType::f64);
  double total = 0;
  for (double x : all) total += x;
  return total;
}

void ZeroSync::gather_weights() {
  const Plan& p = plan();
  if (!p.sharding.shards_optimizer() || p.sharding.shards_weights()) return;
  const DType dtype = p.policy.weights;
  const int world = p.sharding.world, rank = p.sharding.rank;
  const int64_t size = static_cast<int64_t>(dtype_size(dtype)), n = p.num_params;
  const int64_t S = p.shard_elems, c = p.chunk_elems;
  char* weights = bytes(memory_.params());
  char* staging = bytes(memory_.comm_staging());
  char* send = staging + world * c * size;
  for (int64_t j0 = 0; j0 < S; j0 += c) {
    const int64_t cj = std::min(c, S - j0);
    const int64_t first = rank * S + j0, avail = std::clamp<int64_t>(n - first, 0, cj);
    if (avail > 0) std::memcpy(send, weights + first * size, avail * size);
    std::memset(send + avail * size, 0, (cj - avail) * size);
    comm_.all_gather(send, staging, cj, dtype);
    for (int r = 0; r < world; ++r) {
      const int64_t dst = r * S + j0, got = std::clamp<int64_t>(n - dst, 0, cj);
      if (got > 0) std::memcpy(weights + dst * size, staging + r * cj * size, got * size);
    }
  }
}

}  // namespace mt
