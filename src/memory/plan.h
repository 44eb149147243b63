// The Plan: TensorTable + policy -> bytes per category, the layout of the parameter buffers, and the packing
// of every tensor with a lifetime into one arena per category (activations, workspace) by offset, so that
// memory freed by one op is reused by later ones. The estimator prints it; the trainer allocates exactly it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "memory/category.h"
#include "memory/tensor_table.h"

namespace mt {

// How model states are stored: the dtypes of weights, gradients and Adam moments, and whether an fp32 master
// copy of the weights exists.
struct ModelStatePolicy {
  DType weights = DType::f32;
  DType grads = DType::f32;
  DType moments = DType::f32;
  bool master_weights = false;
};

constexpr int64_t kArenaAlignment = 64;  // every packed tensor starts on a cache line

struct ArenaLayout {
  int64_t size = 0;             // bytes the arena needs
  int64_t sum_of_tensors = 0;   // bytes if no two tensors shared memory (aligned sizes)
  std::vector<int64_t> offset;  // per tensor id; -1 when the tensor is not in this arena
};

struct Plan {
  ModelStatePolicy policy;
  CategoryBytes bytes;                // planned, per category
  int64_t num_params = 0;             // elements of all parameter tensors
  std::vector<int64_t> param_offset;  // per tensor id: element offset into the parameter buffers, or -1
  ArenaLayout activations;
  ArenaLayout workspace;
};

// Packs the tensors of `category` that have lifetimes: largest first, each at the lowest aligned offset that
// overlaps no already placed tensor whose lifetime intersects its own.
ArenaLayout pack_arena(const TensorTable& table, Category category);

Plan make_plan(const TensorTable& table, const ModelStatePolicy& policy);

}  // namespace mt
