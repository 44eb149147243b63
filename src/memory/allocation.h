// Allocation: the trainer's memory, exactly as the Plan lays it out. Parameters, master weights, gradients
// and Adam moments are one contiguous buffer each (in the dtypes of the Plan's policy) (tensors at the Plan's
// offsets, no padding, so bytes per parameter are exact; master weights and moments are only the chunk slots
// when offloaded), tensors with lifetimes live in their category's Arena, and the remaining tensors get a
// buffer each.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/half.h"
#include "memory/arena.h"
#include "memory/optimizer_state.h"
#include "memory/plan.h"
#include "memory/tensor_table.h"
#include "memory/tracked.h"

namespace mt {

class Allocation {
 public:
  Allocation(const TensorTable& table, const Plan& plan);

  // A tensor's memory: parameters from the weight buffer, arena tensors while live, others from their buffer.
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
  // A parameter's gradient (G = the policy's gradient dtype).
  template <typename G>
  G* grad(int param_id) const {
    check_dtype(plan_.policy.grads, dtype_of<G>(), param_id);
    return grads_.as<G>() + param_offset(param_id);
  }

  // Whole model-state buffers in the policy's dtypes, num_params() elements each. Master weights and Adam
  // moments are reached through optimizer_state(): in memory, or in the plan's offload file.
  const Plan& plan() const { return plan_; }
  int64_t num_params() const { return plan_.num_params; }
  // The parameter's element offset in the flat weight and gradient buffers.
  int64_t param_offset(int param_id) const;
  void* params() const { return params_.as<void>(); }
  void* grads() const { return grads_.as<void>(); }
  OptimizerState& optimizer_state() const { return *optimizer_state_; }
  void* comm_staging() const { return comm_.as<void>(); }  // (world + 1) chunks of 4-byte elements

  void begin_op(int op);
  void end_op(int op);
  void reset_arenas();

  // Bytes actually held: model states and other buffers as allocated, arenas by their high-water marks.
  CategoryBytes measured() const;
  // Bytes held now: the buffers as allocated and the tensors bound in the arenas (see Arena::live_bytes).
  CategoryBytes live() const;
  const Arena& activations() const { return activations_; }
  const Arena& workspace() const { return workspace_; }

 private:
  void check_dtype(DType actual, DType requested, int id) const;

  const TensorTable& table_;
  const Plan& plan_;
  MemoryTracker tracker_;
  TrackedBuffer params_, master_, grads_, adam_m_, adam_v_, comm_;
  std::vector<TrackedBuffer> others_;  // per tensor id; empty for tensors held elsewhere
  Arena activations_, workspace_;
  std::unique_ptr<OptimizerState> optimizer_state_;  // over master_, adam_m_, adam_v_
};

}  // namespace mt
