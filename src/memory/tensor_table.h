// The TensorTable: every tensor a training run holds, with shape, dtype, memory category and, for tensors
// that live only part of a step (activations, workspace), the [first, last] op of the step schedule that
// touches them. The Plan, the estimator and the allocator all read this one table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/weight_format.h"
#include "memory/category.h"

namespace mt {

// A frozen weight stored block-quantized (--base-quant): its parts (a fused weight's Hugging Face tensors in
// stored order, each of whole rows) quantized on their own, one after the other in the tensor's buffer, each
// laid out as quantized_weight_at reads it.
struct QuantizedStorage {
  WeightFormat format = WeightFormat::nf4;
  bool double_quant = true;
  std::vector<int64_t> parts;  // elements of each

  int64_t bytes() const;
  // The parts' views of the tensor's buffer, in order.
  std::vector<QuantizedWeight> views(void* buffer) const;
  // The index of the part whose first element is `first` (std::logic_error if none is).
  size_t part_starting_at(int64_t first) const;
};

// A tensor-parallel rank's part of a parameter (Megatron's layout): along dimension `dim` of the whole
// tensor's shape `whole`, the index ranges (start, length) in `ranges`, one after the other. A fused
// projection's part is several ranges (LLaMA's q, k and v heads of this rank; gate and up).
struct TensorShard {
  std::vector<int64_t> whole;
  int dim = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges;

  int64_t whole_numel() const;
  // The index in the whole tensor (row-major) of the part's element `local`.
  int64_t whole_index(int64_t local) const;
};

struct TensorDesc {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  Category category = Category::other;
  // Inclusive op range in which the tensor is live; -1 for tensors held for the whole run.
  int first_op = -1;
  int last_op = -1;
  // A frozen weight's block-quantized storage; its dtype stays the one products dequantize into.
  std::optional<QuantizedStorage> quantized = std::nullopt;
  // Parameters: the block (an embedding, a layer, a final norm) whose weights ZeRO-3 gathers together and
  // whose gradients ZeRO-2 reduces together; a model's blocks are consecutive in the table. -1 otherwise.
  int block = -1;
  // Tensor parallel: the part of the whole parameter this rank holds; none for a replicated one.
  std::optional<TensorShard> shard = std::nullopt;
  // Sequence parallel: each tensor-parallel rank's gradient covers its own tokens; the step sums them.
  bool grad_summed_over_tp = false;
  // Host memory for a tensor the host fills or reads itself (MemorySpace); buffers only, never packed.
  MemorySpace space = MemorySpace::device;
  // A batch tensor on a device whose memory the host cannot write: its host twin, which the host fills and
  // the device copies in (Allocation::upload). -1 where the host writes the tensor itself.
  int staging = -1;

  // The whole parameter's elements: numel() unless the tensor is a shard.
  int64_t whole_numel() const { return shard ? shard->whole_numel() : numel(); }
  // Both throw SizeOverflow (core/int_math.h) rather than wrap; bytes are the quantized storage's, if any.
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
