#include "memory/tensor_table.h"

#include <stdexcept>

#include "core/int_math.h"

namespace mt {

int64_t QuantizedStorage::bytes() const {
  int64_t sum = 0;
  for (int64_t n : parts) sum = checked_add(sum, quantized_weight_bytes(format, n, double_quant));
  return sum;
}

std::vector<QuantizedWeight> QuantizedStorage::views(void* buffer) const {
  std::vector<QuantizedWeight> out;
  char* at = static_cast<char*>(buffer);
  for (int64_t n : parts) {
    out.push_back(quantized_weight_at(format, n, double_quant, at));
    at += quantized_weight_bytes(format, n, double_quant);
  }
  return out;
}

size_t QuantizedStorage::part_starting_at(int64_t first) const {
  int64_t start = 0;
  for (size_t i = 0; i < parts.size(); start += parts[i], ++i)
    if (start == first) return i;
  throw std::logic_error("no quantized part starts at element " + std::to_string(first));
}

int64_t TensorShard::whole_numel() const {
  int64_t n = 1;
  for (int64_t d : whole) n = checked_mul(n, d);
  return n;
}

int64_t TensorShard::whole_index(int64_t local) const {
  int64_t inner = 1, local_dim = 0;
  for (size_t d = static_cast<size_t>(dim) + 1; d < whole.size(); ++d) inner *= whole[d];
  for (const auto& range : ranges) local_dim += range.second;
  const int64_t outer = local / (local_dim * inner), rest = local % (local_dim * inner);
  int64_t j = rest / inner;
  for (const auto& [start, length] : ranges) {
    if (j < length) return (outer * whole[static_cast<size_t>(dim)] + start + j) * inner + rest % inner;
    j -= length;
  }
  throw std::logic_error("tensor shard: element " + std::to_string(local) + " outside the part");
}

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n = checked_mul(n, d);
  return n;
}

int64_t TensorDesc::bytes() const {
  if (quantized) return quantized->bytes();
  return checked_mul(numel(), static_cast<int64_t>(dtype_size(dtype)));
}

int TensorTable::add(TensorDesc desc) {
  tensors_.push_back(std::move(desc));
  return size() - 1;
}

int64_t TensorTable::numel(Category c) const {
  int64_t n = 0;
  for (const TensorDesc& t : tensors_)
    if (t.category == c) n = checked_add(n, t.numel());
  return n;
}

}  // namespace mt
