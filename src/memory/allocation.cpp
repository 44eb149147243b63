#include "memory/allocation.h"

#include <stdexcept>
#include <string>

#include "memory/offloaded_state.h"

namespace mt {

Allocation::Allocation(const TensorTable& table, const Plan& plan, Device& device)
    : table_(table),
      plan_(plan),
      device_(device),
      tracker_(device.allocator(MemorySpace::device)),
      host_tracker_(device.allocator(MemorySpace::host)),
      params_(tracker_, Category::params, plan.bytes[Category::params]),
      master_(tracker_, Category::master, plan.bytes[Category::master]),
      grads_(tracker_, Category::grads, plan.bytes[Category::grads] - plan.grads.size),
      adam_m_(tracker_, Category::optim, plan.m_bytes),
      adam_v_(tracker_, Category::optim, plan.v_bytes),
      v_sums_(tracker_, Category::optim, plan.v_sums_bytes),
      m_scales_(tracker_, Category::optim, plan.moment_scales * 4),
      v_scales_(tracker_, Category::optim, plan.v_scales() * 4),
      others_(table.size()),
      activations_(table, plan.activations, Category::activations, tracker_.allocator(), plan.alignment),
      workspace_(table, plan.workspace, Category::workspace, tracker_.allocator(), plan.alignment),
      comm_arena_(table, plan.comm, Category::comm, tracker_.allocator(), plan.alignment),
      grads_arena_(table, plan.grads, Category::grads, tracker_.allocator(), plan.alignment) {
  for (int id = 0; id < table.size(); ++id) {
    const TensorDesc& t = table[id];
    if (t.category != Category::params && !t.has_lifetime())
      others_[id] =
          TrackedBuffer(t.space == MemorySpace::host ? host_tracker_ : tracker_, t.category, t.bytes());
  }
  const StateBuffers buffers{master_.as<float>(), adam_m_.as<void>(), adam_v_.as<void>(),
                             m_scales_.as<float>(), v_scales_.as<float>()};
  if (plan.offload.enabled)
    optimizer_state_ = std::make_unique<OffloadedOptimizerState>(plan, buffers);
  else
    optimizer_state_ = std::make_unique<InMemoryOptimizerState>(plan, buffers);
}

int64_t Allocation::committed_device() const {
  return tracker_.committed() + activations_.committed() + workspace_.committed() + comm_arena_.committed() +
         grads_arena_.committed();
}

void* Allocation::data(int id) const {
  const TensorDesc& t = table_[id];
  if (t.category == Category::params) {
    if (plan_.sharding.shards_weights()) throw_not_held(id, "weights");
    return params_.as<char>() + param_offset(id) * static_cast<int64_t>(dtype_size(t.dtype));
  }
  if (t.has_lifetime()) return arena(t.category).data(id);
  return others_[id].as<void>();
}

void* Allocation::staged(int id) const {
  return data(table_[id].staging >= 0 ? table_[id].staging : id);
}

void Allocation::upload(int id) const {
  if (const int staging = table_[id].staging; staging >= 0)
    device_.copy_from_host(data(id), data(staging), table_[id].bytes());
}

void Allocation::throw_not_held(int param_id, const char* what) const {
  throw std::logic_error("allocation: this rank's buffer does not hold the " + std::string(what) + " of " +
                         table_[param_id].name + " (schedule bug: the op names no window buffer)");
}

int64_t Allocation::block_offset(int block_tensor, int first_param, int param_id) const {
  const int64_t offset = param_offset(param_id) - param_offset(first_param);
  if (offset < 0 || offset + table_[param_id].numel() > table_[block_tensor].numel())
    throw std::logic_error("allocation: " + table_[param_id].name + " is not in " +
                           table_[block_tensor].name + " (ZeRO schedule bug)");
  return offset;
}

int64_t Allocation::held_index(int64_t flat, int64_t begin, int64_t end, const char* what) const {
  if (flat < begin || flat > end)
    throw std::logic_error("allocation: flat element " + std::to_string(flat) + " is outside this rank's " +
                           what + " [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  return flat - begin;
}

void* Allocation::weights_at(int64_t flat) const {
  const int64_t index = held_index(flat, plan_.weights_begin(), plan_.weights_end(), "weights");
  return params_.as<char>() + index * static_cast<int64_t>(dtype_size(plan_.policy.weights));
}

void* Allocation::grads_at(int64_t flat) const {
  const int64_t index = held_index(flat, plan_.grads_begin(), plan_.grads_end(), "gradients");
  return grads_.as<char>() + index * static_cast<int64_t>(dtype_size(plan_.policy.grads));
}

int64_t Allocation::param_offset(int param_id) const {
  if (table_[param_id].category != Category::params)
    throw std::logic_error("allocation: " + table_[param_id].name + " is not a parameter");
  return plan_.param_offset[param_id];
}

void Allocation::check_dtype(DType actual, DType requested, int id) const {
  if (actual != requested)
    throw std::logic_error(
        "allocation: " + (id >= 0 ? table_[id].name : std::string("a model-state buffer")) + " is " +
        std::string(dtype_name(actual)) + ", accessed as " + std::string(dtype_name(requested)));
}

const Arena& Allocation::arena(Category category) const {
  switch (category) {
    case Category::activations:
      return activations_;
    case Category::workspace:
      return workspace_;
    case Category::comm:
      return comm_arena_;
    case Category::grads:
      return grads_arena_;
    default:
      throw std::logic_error("allocation: no arena holds " + std::string(category_key(category)));
  }
}

void Allocation::begin_op(int op) {
  for (Arena* a : arenas()) a->begin_op(op);
}

void Allocation::end_op(int op) {
  for (Arena* a : arenas()) a->end_op(op);
}

void Allocation::reset_arenas() {
  for (Arena* a : arenas()) a->reset();
}

CategoryBytes Allocation::measured() const {
  CategoryBytes bytes = tracker_.peak();
  for (Category c : kAllCategories) bytes[c] += host_tracker_.peak()[c];
  for (Category c : kArenaCategories) bytes[c] += arena(c).high_water();
  return bytes;
}

CategoryBytes Allocation::live() const {
  CategoryBytes bytes = tracker_.held();
  for (Category c : kAllCategories) bytes[c] += host_tracker_.held()[c];
  for (Category c : kArenaCategories) bytes[c] += arena(c).live_bytes();
  return bytes;
}

}  // namespace mt
