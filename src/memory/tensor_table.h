// The TensorTable: every tensor a training run holds, with shape, dtype, memory category and, for tensors
// that live only part of a step (activations, workspace), the [first, last] op of the step schedule that
// touches them. The Plan, the estimator and the allocator all read this one table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "memory/category.h"

namespace mt {

struct TensorDesc {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  Category category = Category::other;
  // Inclusive op range in which the tensor is live; -1 for tensors held for the whole run.
  int first_op = -1;
  int last_op = -1;
  // Parameters: the block (an embedding, a layer, a final norm) whose weights ZeRO-3 gathers together and
  // whose gradients ZeRO-2 reduces together; a model's blocks are consecutive in the table. -1 otherwise.
  int block = -1;

  // Both throw SizeOverflow (core/int_math.h) rather than wrap.
  int64_t numel() const;
  int64_t bytes() const;
  bool has_lifetime() const { return first_op >= 0; }
};

class TensorTable {
 public:
  int add(TensorDesc desc);  // returns the tensor's id
  const TensorDesc& operator[](int id) const { return tensors_.at(id); }
  TensorDesc& operator[](int id) { return tensors_.at(id); }
  int size() const { return static_cast<int>(tensors_.size()); }
  const std::vector<TensorDesc>& tensors() const { return tensors_; }

  // Sum of numel over the tensors of one category (for per-parameter byte counts).
  int64_t numel(Category c) const;

 private:
  std::vector<TensorDesc> tensors_;
};

}  // namespace mt
