#include "dist/local_sum.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/half.h"

namespace mt {
namespace {

// Elements per block: the fp32 accumulator of one block lives on the stack, and blocks are what threads
// split.
constexpr int64_t kBlock = 2048;

// 16-bit and fp32 values sum in fp32, doubles in double.
template <typename T>
using Accumulator = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
Accumulator<T> widened(T x) {
  if constexpr (std::is_same_v<T, double>)
    return x;
  else
    return to_f32(x);
}

template <typename T>
T narrowed(Accumulator<T> x) {
  if constexpr (std::is_same_v<T, double>)
    return x;
  else
    return round_to<T>(x);
}

template <typename T>
void sum_parts(std::span<const void* const> parts, T* out, int64_t count) {
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  // Each element's order of additions is fixed whatever the thread count; small sums stay on one thread.
#pragma omp parallel for schedule(static) if (blocks > 8)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, n = std::min(kBlock, count - begin);
    Accumulator<T> acc[kBlock];
    const T* first = static_cast<const T*>(parts[0]) + begin;
    for (int64_t i = 0; i < n; ++i) acc[i] = widened(first[i]);
    for (std::size_t r = 1; r < parts.size(); ++r) {
      const T* part = static_cast<const T*>(parts[r]) + begin;
      for (int64_t i = 0; i < n; ++i) acc[i] += widened(part[i]);
    }
    for (int64_t i = 0; i < n; ++i) out[begin + i] = narrowed<T>(acc[i]);
  }
}

}  // namespace

void check_sum_dtype(DType dtype, const char* operation) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16 && dtype != DType::f64) {
    throw std::invalid_argument(std::string(operation) + ": cannot sum dtype " +
                                std::string(dtype_name(dtype)) + " (f32, bf16, f16 or f64)");
  }
}

void check_count(int64_t count, const char* operation) {
  if (count < 0) throw std::invalid_argument(std::string(operation) + ": negative count");
}

void sum_in_rank_order(std::span<const void* const> parts, void* out, int64_t count, DType dtype) {
  check_sum_dtype(dtype, "sum_in_rank_order");
  if (parts.empty()) throw std::invalid_argument("sum_in_rank_order: no parts");
  switch (dtype) {
    case DType::f32:
      return sum_parts(parts, static_cast<float*>(out), count);
    case DType::bf16:
      return sum_parts(parts, static_cast<bf16*>(out), count);
    case DType::f64:
      return sum_parts(parts, static_cast<double*>(out), count);
    default:  // f16, as checked
      return sum_parts(parts, static_cast<f16*>(out), count);
  }
}

}  // namespace mt
