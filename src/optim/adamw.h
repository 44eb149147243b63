// The optimizer step over every parameter tensor: global-norm clipping, then AdamW with weight decay only on
// the tensors the model says decay.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/allocation.h"
#include "memory/tensor_table.h"

namespace mt {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  float clip_grad = 1.0f;  // global gradient norm limit; 0 turns clipping off
};

struct ParamGroup {
  int id;      // parameter tensor
  bool decay;  // gets weight decay
};

class AdamW {
 public:
  AdamW(const AdamWConfig& config, std::vector<ParamGroup> params)
      : config_(config), params_(std::move(params)) {}

  // Clips the gradients in place (when enabled) and updates weights and moments; returns the gradient norm
  // before clipping. `step` is 1-based.
  double step(const TensorTable& table, Allocation& memory, float lr, int64_t step);

 private:
  AdamWConfig config_;
  std::vector<ParamGroup> params_;
};

}  // namespace mt
