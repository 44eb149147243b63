#include "memory/tensor_table.h"

namespace mt {

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int TensorTable::add(TensorDesc desc) {
  tensors_.push_back(std::move(desc));
  return size() - 1;
}

int64_t TensorTable::numel(Category c) const {
  int64_t n = 0;
  for (const TensorDesc& t : tensors_)
    if (t.category == c) n += t.numel();
  return n;
}

}  // namespace mt
