#include "dist/local_sum.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/half.h"

namespace mt {
namespace {

// Elements per block: the fp32 accumulator of one block lives on the stack, and blocks are what threads
// split.
constexpr int64_t kBlock = 2048;

template <typename T>
void sum_parts(std::span<const void* const> parts, T* out, int64_t count) {
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  // Each element's order of additions is fixed whatever the thread count; small sums stay on one thread.
#pragma omp parallel for schedule(static) if (blocks > 8)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, n = std::min(kBlock, count - begin);
    float acc[kBlock];
    const T* first = static_cast<const T*>(parts[0]) + begin;
    for (int64_t i = 0; i < n; ++i) acc[i] = to_f32(first[i]);
    for (std::size_t r = 1; r < parts.size(); ++r) {
      const T* part = static_cast<const T*>(parts[r]) + begin;
      for (int64_t i = 0; i < n; ++i) acc[i] += to_f32(part[i]);
    }
    for (int64_t i = 0; i < n; ++i) out[begin + i] = round_to<T>(acc[i]);
  }
}

}  // namespace

void check_sum_dtype(DType dtype, const char* operation) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) {
    throw std::invalid_argument(std::string(operation) + ": cannot sum dtype " +
                                std::string(dtype_name(dtype)) + " (f32, bf16 or f16)");
  }
}

void sum_in_rank_order(std::span<const void* const> parts, void* out, int64_t count, DType dtype) {
  check_sum_dtype(dtype, "sum_in_rank_order");
  if (parts.empty()) throw std::invalid_argument("sum_in_rank_order: no parts");
  switch (dtype) {
    case DType::f32:
      return sum_parts(parts, static_cast<float*>(out), count);
    case DType::bf16:
      return sum_parts(parts, static_cast<bf16*>(out), count);
    default:  // f16, as checked
      return sum_parts(parts, static_cast<f16*>(out), count);
  }
}

}  // namespace mt
