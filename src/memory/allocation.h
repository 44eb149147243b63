// Allocation: the trainer's memory, exactly as the Plan lays it out. Parameters, gradients and Adam moments
// are one contiguous buffer each (tensors at the Plan's offsets, no padding, so bytes per parameter are
// exact), tensors with lifetimes live in their category's Arena, and the remaining tensors get a buffer each.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/arena.h"
#include "memory/plan.h"
#include "memory/tensor_table.h"
#include "memory/tracked.h"

namespace mt {

class Allocation {
 public:
  Allocation(const TensorTable& table, const Plan& plan);

  // A tensor's memory: parameters from the weight buffer, arena tensors while live, others from their buffer.
  void* data(int id) const;
  float* f32(int id) const { return static_cast<float*>(data(id)); }
  int32_t* i32(int id) const { return static_cast<int32_t*>(data(id)); }
  float* grad(int param_id) const;  // the parameter's gradient

  // Whole model-state buffers, num_params() elements each.
  int64_t num_params() const { return plan_.num_params; }
  float* params() const { return params_.as<float>(); }
  float* grads() const { return grads_.as<float>(); }
  float* adam_m() const { return adam_m_.as<float>(); }
  float* adam_v() const { return adam_v_.as<float>(); }

  void begin_op(int op);
  void end_op(int op);
  void reset_arenas();

  // Bytes actually held: model states and other buffers as allocated, arenas by their high-water marks.
  CategoryBytes measured() const;
  const Arena& activations() const { return activations_; }
  const Arena& workspace() const { return workspace_; }

 private:
  const TensorTable& table_;
  const Plan& plan_;
  MemoryTracker tracker_;
  TrackedBuffer params_, grads_, adam_m_, adam_v_;
  std::vector<TrackedBuffer> others_;  // per tensor id; empty for tensors held elsewhere
  Arena activations_, workspace_;
};

}  // namespace mt
