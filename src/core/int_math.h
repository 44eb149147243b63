// Integer rounding for sizes, tiles and blocks.
#pragma once

#include <cstdint>

namespace mt {

// n / m rounded up, for n >= 0 and m > 0.
constexpr int64_t ceil_div(int64_t n, int64_t m) {
  return (n + m - 1) / m;
}

// n rounded up to a multiple of m.
constexpr int64_t round_up(int64_t n, int64_t m) {
  return ceil_div(n, m) * m;
}

}  // namespace mt
