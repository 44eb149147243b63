// Allocation: the trainer's memory, exactly as the Plan lays it out. Parameters, master weights, gradients
// and Adam moments are one contiguous buffer each (in the dtypes of the Plan's policy) (tensors at the Plan's
// offsets, no padding, so bytes per parameter are exact; under ZeRO only this rank's shard of some of them;
// master weights and moments are only the chunk slots when offloaded), tensors with lifetimes live in their
// category's Arena, and the remaining tensors get a buffer each. Every buffer comes from the run's Device
// (memory/device.h), from the allocator of its tensor's memory space; the device's memory may not be the
// host's, so code above memory/ reaches the bytes through the device, never by itself.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/half.h"
#include "memory/arena.h"
#include "memory/device.h"
#include "memory/optimizer_state.h"
#include "memory/plan.h"
#include "memory/tensor_table.h"
#include "memory/tracked.h"

namespace mt {

class Allocation {
 public:
  Allocation(const TensorTable& table, const Plan& plan, Device& device);

  // The device the buffers live on: its operations are the only way to their bytes.
  Device& device() const { return device_; }

  // A tensor's memory: parameters from the weight buffer (which must hold them whole: not under ZeRO-3),
  // arena tensors while live, others from their buffer.
  void* data(int id) const;
  // The same, typed; T must be the tensor's dtype (checked: a mismatch is a bug, not bad input).
  template <typename T>
  T* as(int id) const {
    check_dtype(table_[id].dtype, dtype_of<T>(), id);
    return static_cast<T*>(data(id));
  }
  float* f32(int id) const { return as<float>(id); }
  int32_t* i32(int id) const {
    check_dtype(table_[id].dtype, DType::i32, id);
    return static_cast<int32_t*>(data(id));
  }
  uint8_t* u8(int id) const {
    check_dtype(table_[id].dtype, DType::u8, id);
    return static_cast<uint8_t*>(data(id));
  }
  // A parameter's gradient (G = the policy's gradient dtype) in the gradient buffer, which must hold it
  // whole: under ZeRO-2/3 an op names its window's gradient sum instead (in_block), and under
  // --optimizer-in-backward its block's gradients.
  template <typename G>
  G* grad(int param_id) const {
    check_dtype(plan_.policy.grads, dtype_of<G>(), param_id);
    if (!plan_.holds_all_grads()) throw_not_held(param_id, "gradient");
    return grads_.as<G>() + param_offset(param_id);
  }
  // A parameter's place in a comm tensor that holds its block's flat range from first_param on (ZeRO-2/3's
  // gathered weights and gradient sums); T is the tensor's dtype.
  template <typename T>
  T* in_block(int block_tensor, int first_param, int param_id) const {
    return as<T>(block_tensor) + block_offset(block_tensor, first_param, param_id);
  }
  // Element `flat` of the flat weights or gradients, in the policy's dtype, which must lie in the range this
  // rank's buffer holds (Plan::weights_begin/grads_begin, end included as a one-past pointer): device memory,
  // for the device's operations and the collectives.
  void* weights_at(int64_t flat) const;
  void* grads_at(int64_t flat) const;
  // Whole model-state buffers in the policy's dtypes, num_params() elements each. Master weights and Adam
  // moments are reached through optimizer_state(): in memory, or in the plan's offload file.
  const Plan& plan() const { return plan_; }
  const TensorTable& table() const { return table_; }
  int64_t num_params() const { return plan_.num_params; }
  // The parameter's element offset in the flat weight and gradient buffers.
  int64_t param_offset(int param_id) const;
  void* params() const { return params_.as<void>(); }
  void* grads() const { return grads_.as<void>(); }
  int64_t grads_bytes() const { return grads_.bytes(); }  // of the flat buffer: none under grads_in_backward
  OptimizerState& optimizer_state() const { return *optimizer_state_; }
  // Adam-mini's per-block sums of squares where a rank holds a shard of the gradients (Plan::v_sums_bytes),
  // else null.
  double* adam_mini_sums() const { return plan_.v_sums_bytes > 0 ? v_sums_.as<double>() : nullptr; }

  // Host memory the host fills a batch tensor through: the tensor itself where the host can write it, else
  // its staging twin (TensorDesc::staging). upload() then copies the twin in (nothing without one).
  void* staged(int id) const;
  void upload(int id) const;

  void begin_op(int op);
  void end_op(int op);
  void reset_arenas();

  // Bytes actually held: model states and other buffers as allocated, arenas by their high-water marks.
  CategoryBytes measured() const;
  // The part of measured() in host memory (MemorySpace::host buffers).
  const CategoryBytes& measured_host() const { return host_tracker_.peak(); }
  // What the device committed for the buffers in its own memory, arenas included
  // (DeviceAllocator::committed): committed_device_bytes(table, plan) of a device whose plan states its
  // granularity.
  int64_t committed_device() const;
  // Bytes held now: the buffers as allocated and the tensors bound in the arenas (see Arena::live_bytes).
  CategoryBytes live() const;
  const Arena& activations() const { return activations_; }
  const Arena& workspace() const { return workspace_; }
  // The arena of a category that has one (kArenaCategories).
  const Arena& arena(Category category) const;

 private:
  void check_dtype(DType actual, DType requested, int id) const;
  [[noreturn]] void throw_not_held(int param_id, const char* what) const;
  int64_t block_offset(int block_tensor, int first_param, int param_id) const;
  int64_t held_index(int64_t flat, int64_t begin, int64_t end, const char* what) const;

  const TensorTable& table_;
  const Plan& plan_;
  Device& device_;
  MemoryTracker tracker_, host_tracker_;
  TrackedBuffer params_, master_, grads_, adam_m_, adam_v_, v_sums_, m_scales_, v_scales_;
  std::vector<TrackedBuffer> others_;  // per tensor id; empty for tensors held elsewhere
  Arena activations_, workspace_, comm_arena_, grads_arena_;
  std::array<Arena*, 4> arenas() { return {&activations_, &workspace_, &comm_arena_, &grads_arena_}; }
  std::unique_ptr<OptimizerState> optimizer_state_;  // over master_, the moments and their scales
};

}  // namespace mt
