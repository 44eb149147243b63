// Integer rounding for sizes, tiles and blocks, and the checked products and sums of the memory plan's byte
// counts, which a large enough configuration would otherwise wrap into a negative total.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>

namespace mt {

// A byte or element count of the plan does not fit 64 bits. layout/run_layout.cpp turns it into a usage error
// naming the flags that set the sizes.
class SizeOverflow : public std::overflow_error {
 public:
  using std::overflow_error::overflow_error;
};

constexpr int64_t checked_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) throw SizeOverflow("a product of sizes overflows 64 bits");
  return product;
}

constexpr int64_t checked_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) throw SizeOverflow("a sum of sizes overflows 64 bits");
  return sum;
}

// a * b, or none when it overflows 64 bits: for the products whose check names the flags that set them.
constexpr std::optional<int64_t> product_if_fits(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// n / m rounded up, for n >= 0 and m > 0.
constexpr int64_t ceil_div(int64_t n, int64_t m) {
  return (n + m - 1) / m;
}

// n rounded up to a multiple of m.
constexpr int64_t round_up(int64_t n, int64_t m) {
  return ceil_div(n, m) * m;
}

}  // namespace mt
