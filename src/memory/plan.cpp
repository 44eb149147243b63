#include "memory/plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/int_math.h"
#include "memory/arena_occupancy.h"
#include "memory/arena_pack_cache.h"

namespace mt {

ArenaLayout pack_arena(const TensorTable& table, Category category, int64_t alignment) {
  if (alignment <= 0) throw std::logic_error("pack_arena: alignment " + std::to_string(alignment));
  ArenaLayout layout;
  layout.offset.assign(table.size(), -1);
  std::vector<int> order;
  std::vector<int64_t> bytes(table.size());  // read once: the sort compares them often
  std::vector<int> bounds;                   // every lifetime's first and last op
  for (int id = 0; id < table.size(); ++id) {
    const TensorDesc& t = table[id];
    if (t.category != category || !t.has_lifetime()) continue;
    if (t.last_op < t.first_op) throw std::logic_error("tensor " + t.name + " ends before it starts");
    order.push_back(id);
    bytes[id] = t.bytes();
    layout.sum_of_tensors = checked_add(layout.sum_of_tensors, arena_aligned(bytes[id], alignment));
    bounds.push_back(t.first_op);
    bounds.push_back(t.last_op);
  }
  // Largest first, ties by earlier start then id: a stable, deterministic packing.
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (bytes[a] != bytes[b]) return bytes[a] > bytes[b];
    if (table[a].first_op != table[b].first_op) return table[a].first_op < table[b].first_op;
    return a < b;
  });
  // Two lifetimes overlap as their bounds' ranks among all bounds do: the occupancy spans those, not every
  // op of the step (a deep model's workspace has far fewer tensors than the step has ops).
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  const auto rank = [&](int op) {
    return static_cast<int>(std::lower_bound(bounds.begin(), bounds.end(), op) - bounds.begin());
  };
  ArenaOccupancy held(static_cast<int>(bounds.size()));
  for (int id : order) {
    const TensorDesc& t = table[id];
    const int first = rank(t.first_op), last = rank(t.last_op);
    const int64_t size = arena_aligned(bytes[id], alignment);
    const int64_t offset = held.lowest_free(first, last, size);
    layout.offset[id] = offset;
    layout.size = std::max(layout.size, checked_add(offset, size));
    held.place(first, last, offset, offset + size);
  }
  return layout;
}

std::vector<int64_t> flat_param_offsets(const TensorTable& table) {
  std::vector<int64_t> offsets(table.size(), -1);
  int64_t next = 0;
  for (int id = 0; id < table.size(); ++id)
    if (table[id].category == Category::params) {
      offsets[id] = next;
      next = checked_add(next, table[id].numel());
    }
  return offsets;
}

const ArenaLayout& Plan::arena(Category category) const {
  switch (category) {
    case Category::activations:
      return activations;
    case Category::workspace:
      return workspace;
    case Category::comm:
      return comm;
    case Category::grads:
      return grads;
    default:
      throw std::logic_error("plan: no arena holds " + std::string(category_key(category)));
  }
}

Plan plan_tensors(const TensorTable& table, int64_t alignment, DType weights, ArenaPackCache* cache) {
  Plan plan;
  plan.alignment = alignment;
  if (!cache) plan.param_offset = flat_param_offsets(table);
  for (int id = 0; id < table.size(); ++id) {
    const TensorDesc& t = table[id];
    if (t.category == Category::params) {
      if (t.dtype != weights)
        throw std::logic_error("parameter " + t.name + " is " + std::string(dtype_name(t.dtype)) +
                               " but the policy stores weights as " + std::string(dtype_name(weights)));
      plan.num_params = checked_add(plan.num_params, t.numel());
    } else if (!t.has_lifetime()) {
      plan.bytes[t.category] = checked_add(plan.bytes[t.category], t.bytes());
      if (t.space == MemorySpace::host) plan.host[t.category] = checked_add(plan.host[t.category], t.bytes());
    } else if (t.space == MemorySpace::host) {
      throw std::logic_error("tensor " + t.name +
                             " in host memory has a lifetime: host buffers are not packed");
    }
  }
  const auto pack = [&](Category category) {
    return cache ? cache->pack(table, category, alignment) : pack_arena(table, category, alignment);
  };
  plan.activations = pack(Category::activations);
  plan.workspace = pack(Category::workspace);
  plan.comm = pack(Category::comm);
  plan.grads = pack(Category::grads);
  return plan;
}

void size_model_states(Plan& plan, const ModelStatePolicy& policy, const Sharding& sharding,
                       const OptimizerOffload& offload) {
  plan.policy = policy;
  plan.sharding = sharding;
  const int64_t n = plan.num_params, block = std::max<int64_t>(policy.moment_block, 1);
  if (sharding.shards_optimizer()) {
    // Blocked moments: a block never straddles two ranks, so a shard is a whole number of blocks.
    const int64_t per_rank = checked_add(n, sharding.dp - 1) / sharding.dp;
    plan.shard_elems = checked_mul(ceil_div(per_rank, block), block);
    plan.shard_begin = std::min(n, checked_mul(sharding.dp_rank, plan.shard_elems));
    plan.shard_end = std::min(n, plan.shard_begin + plan.shard_elems);
  } else {
    plan.shard_elems = plan.shard_end = n;
  }
  // The communicators' own buffers (none on one rank), of the data-parallel group and of any other.
  plan.bytes[Category::comm] = checked_add(plan.bytes[Category::comm], sharding.comm_internal_bytes);
  const int64_t master_size = policy.master_weights ? 4 : 0;
  const int64_t moment_size = static_cast<int64_t>(dtype_size(policy.moments));
  // Held in memory: the whole shard, or the offload's chunk slots with the shard in the file. A chunk is
  // whole blocks of blocked moments, so that a window starts on a block.
  plan.state_elems = plan.shard_elems;
  plan.moment_scales = policy.moment_scales(plan.shard_elems);
  if (policy.v_blocks > 0 && offload.enabled)
    throw std::logic_error("adam-mini's second moments are held whole, in memory: no offload");
  if (offload.enabled) {
    if (offload.chunk_elems <= 0) throw std::logic_error("optimizer offload needs a positive chunk size");
    plan.offload = offload;
    const int64_t shard = std::max<int64_t>(plan.shard_elems, 1);
    plan.offload.chunk_elems = std::min(round_up(std::min(offload.chunk_elems, shard), block), shard);
    plan.offloaded_bytes = checked_add(checked_mul(plan.shard_elems, master_size + 2 * moment_size),
                                       checked_mul(plan.moment_scales, 8));
    plan.state_elems = checked_mul(kOffloadSlots, plan.offload.chunk_elems);
    plan.moment_scales = checked_mul(kOffloadSlots, policy.moment_scales(plan.offload.chunk_elems));
  }
  const int64_t s = plan.state_elems;
  plan.bytes[Category::params] = checked_mul(sharding.shards_weights() ? plan.shard_elems : n,
                                             static_cast<int64_t>(dtype_size(policy.weights)));
  plan.bytes[Category::master] = checked_mul(s, master_size);
  const int64_t flat_grads = policy.grads_in_backward ? 0 : sharding.shards_grads() ? plan.shard_elems : n;
  plan.bytes[Category::grads] = checked_mul(flat_grads, static_cast<int64_t>(dtype_size(policy.grads)));
  plan.m_bytes = checked_mul(s, moment_size);
  plan.v_bytes = policy.v_blocks > 0 ? checked_mul(policy.v_blocks, 4) : plan.m_bytes;
  if (policy.v_blocks > 0 && sharding.shards_grads() && !policy.grads_in_backward)
    plan.v_sums_bytes = checked_mul(policy.v_blocks, 8);
  plan.bytes[Category::optim] =
      checked_add(checked_add(checked_add(plan.m_bytes, plan.v_bytes), plan.v_sums_bytes),
                  checked_mul(checked_add(plan.moment_scales, plan.v_scales()), 4));
  for (Category c : kArenaCategories) plan.bytes[c] = checked_add(plan.bytes[c], plan.arena(c).size);
  plan.bytes.total();  // every sum of the categories that reports print fits as well
}

std::vector<PlannedBuffer> plan_buffers(const Plan& plan) {
  const auto device = [](Category category, int64_t bytes) {
    return PlannedBuffer{category, MemorySpace::device, bytes};
  };
  std::vector<PlannedBuffer> buffers = {
      device(Category::params, plan.bytes[Category::params]),
      device(Category::master, plan.bytes[Category::master]),
      device(Category::grads, plan.bytes[Category::grads] - plan.grads.size),
      device(Category::optim, plan.m_bytes),
      device(Category::optim, plan.v_bytes),
      device(Category::optim, plan.v_sums_bytes),
      device(Category::optim, checked_mul(plan.moment_scales, 4)),
      device(Category::optim, checked_mul(plan.v_scales(), 4))};
  for (Category c : kArenaCategories) buffers.push_back(device(c, plan.arena(c).size));
  return buffers;
}

std::vector<PlannedBuffer> tensor_buffers(const TensorTable& table) {
  std::vector<PlannedBuffer> buffers;
  for (int id = 0; id < table.size(); ++id) {
    const TensorDesc& t = table[id];
    if (t.category != Category::params && !t.has_lifetime())
      buffers.push_back({t.category, t.space, t.bytes()});
  }
  return buffers;
}

std::vector<PlannedBuffer> planned_buffers(const TensorTable& table, const Plan& plan) {
  std::vector<PlannedBuffer> buffers = plan_buffers(plan);
  const std::vector<PlannedBuffer> tensors = tensor_buffers(table);
  buffers.insert(buffers.end(), tensors.begin(), tensors.end());
  return buffers;
}

CategoryBytes committed_bytes(const std::vector<PlannedBuffer>& buffers, int64_t granularity) {
  CategoryBytes committed;
  for (const PlannedBuffer& b : buffers)
    if (b.space == MemorySpace::device)
      committed[b.category] = checked_add(committed[b.category], b.committed(granularity));
  return committed;
}

CategoryBytes committed_device_bytes(const TensorTable& table, const Plan& plan) {
  return committed_bytes(planned_buffers(table, plan), plan.commit_granularity);
}

Plan make_plan(const TensorTable& table, int64_t alignment, const ModelStatePolicy& policy,
               const Sharding& sharding, const OptimizerOffload& offload, ArenaPackCache* cache) {
  Plan plan = plan_tensors(table, alignment, policy.weights, cache);
  size_model_states(plan, policy, sharding, offload);
  return plan;
}

}  // namespace mt
