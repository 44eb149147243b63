#include "train/zero_sync.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace mt {

namespace {

char* bytes(void* p) {
  return static_cast<char*>(p);
}

}  // namespace

void ZeroSync::reduce_gradients() {
  const Plan& p = plan();
  if (p.sharding.world == 1) return;
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
  if (!p.sharding.shards_optimizer()) return;
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
