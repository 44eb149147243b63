#include "memory/tensor_table.h"

#include "core/int_math.h"

namespace mt {

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n = checked_mul(n, d);
  return n;
}

int64_t TensorDesc::bytes() const {
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
