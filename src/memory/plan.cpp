#include "memory/plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mt {

ArenaLayout pack_arena(const TensorTable& table, Category category) {
  ArenaLayout layout;
  layout.offset.assign(table.size(), -1);
  std::vector<int> order;
  for (int id = 0; id < table.size(); ++id) {
    const TensorDesc& t = table[id];
    if (t.category != category || !t.has_lifetime()) continue;
    if (t.last_op < t.first_op) throw std::logic_error("tensor " + t.name + " ends before it starts");
    order.push_back(id);
    layout.sum_of_tensors += arena_aligned(t.bytes());
  }
  // Largest first, ties by earlier start then id: a stable, deterministic packing.
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (table[a].bytes() != table[b].bytes()) return table[a].bytes() > table[b].bytes();
    if (table[a].first_op != table[b].first_op) return table[a].first_op < table[b].first_op;
    return a < b;
  });
  // Placed tensors in address order, (begin, end), with their lifetimes: first fit walks them once, skipping
  // those whose lifetimes do not meet the new tensor's, without re-reading the table or sorting per tensor.
  struct Placed {
    int64_t begin, end;
    int first_op, last_op;
  };
  std::vector<Placed> placed;
  for (int id : order) {
    const TensorDesc& t = table[id];
    const int64_t size = arena_aligned(t.bytes());
    int64_t offset = 0;
    for (const Placed& p : placed) {
      if (p.first_op > t.last_op || t.first_op > p.last_op) continue;
      if (offset + size <= p.begin) break;
      offset = std::max(offset, p.end);
    }
    layout.offset[id] = offset;
    layout.size = std::max(layout.size, offset + size);
    const Placed now{offset, offset + size, t.first_op, t.last_op};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), now,
                                   [](const Placed& a, const Placed& b) {
                                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                                   }),
                  now);
  }
  return layout;
}

Plan make_plan(const TensorTable& table, const ModelStatePolicy& policy, const Sharding& sharding,
               const OptimizerOffload& offload) {
  Plan plan;
  plan.policy = policy;
  plan.sharding = sharding;
  plan.param_offset.assign(table.size(), -1);
  for (int id = 0; id < table.size(); ++id) {
    const TensorDesc& t = table[id];
    if (t.category == Category::params) {
      if (t.dtype != policy.weights)
        throw std::logic_error("parameter " + t.name + " is " + std::string(dtype_name(t.dtype)) +
                               " but the policy stores weights as " +
                               std::string(dtype_name(policy.weights)));
      plan.param_offset[id] = plan.num_params;
      plan.num_params += t.numel();
    } else if (!t.has_lifetime()) {
      plan.bytes[t.category] += t.bytes();
    }
  }
  const int64_t n = plan.num_params;
  if (sharding.shards_optimizer()) {
    plan.shard_elems = (n + sharding.world - 1) / sharding.world;
    plan.shard_begin = std::min(n, sharding.rank * plan.shard_elems);
    plan.shard_end = std::min(n, plan.shard_begin + plan.shard_elems);
  } else {
    plan.shard_elems = plan.shard_end = n;
  }
  if (sharding.world > 1) plan.bytes[Category::comm] += sharding.comm_internal_bytes;
  const int64_t master_size = policy.master_weights ? 4 : 0;
  const int64_t moment_size = static_cast<int64_t>(dtype_size(policy.moments));
  // Held in memory: the whole shard, or the offload's chunk slots with the shard in the file.
  int64_t s = plan.shard_elems;
  if (offload.enabled) {
    if (offload.chunk_elems <= 0) throw std::logic_error("optimizer offload needs a positive chunk size");
    plan.offload = offload;
    plan.offload.chunk_elems = std::min(offload.chunk_elems, std::max<int64_t>(plan.shard_elems, 1));
    plan.offloaded_bytes = plan.shard_elems * (master_size + 2 * moment_size);
    s = kOffloadSlots * plan.offload.chunk_elems;
  }
  plan.bytes[Category::params] =
      (sharding.shards_weights() ? plan.shard_elems : n) * static_cast<int64_t>(dtype_size(policy.weights));
  plan.bytes[Category::master] = s * master_size;
  plan.bytes[Category::grads] =
      (sharding.shards_grads() ? plan.shard_elems : n) * static_cast<int64_t>(dtype_size(policy.grads));
  plan.bytes[Category::optim] = 2 * s * moment_size;
  plan.activations = pack_arena(table, Category::activations);
  plan.workspace = pack_arena(table, Category::workspace);
  plan.comm = pack_arena(table, Category::comm);
  plan.bytes[Category::activations] += plan.activations.size;
  plan.bytes[Category::workspace] += plan.workspace.size;
  plan.bytes[Category::comm] += plan.comm.size;
  return plan;
}

}  // namespace mt
