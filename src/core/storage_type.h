// A run's storage dtype as a C++ type, for the devices' host-facing operations that dispatch once on the
// dtypes they are handed (the CPU's and the GPU's convert, sum of squares and AdamW).
#pragma once

#include <stdexcept>
#include <string>

#include "core/dtype.h"
#include "core/half.h"

namespace mt {

template <typename T>
struct StorageType {
  using type = T;
};

// Calls f(StorageType<T>{}) for the storage type of a weight, gradient or moment dtype: fp32, bf16, and f16
// where the operation takes it (kF16); a logic error naming `device` and `what` for any other.
template <bool kF16 = true, typename F>
void with_storage_type(DType dtype, const char* device, const char* what, F f) {
  switch (dtype) {
    case DType::f32:
      return f(StorageType<float>{});
    case DType::bf16:
      return f(StorageType<bf16>{});
    case DType::f16:
      if constexpr (kF16) return f(StorageType<f16>{});
      break;
    default:
      break;
  }
  throw std::logic_error(std::string(device) + ": " + what + " of dtype " + std::string(dtype_name(dtype)));
}

}  // namespace mt
