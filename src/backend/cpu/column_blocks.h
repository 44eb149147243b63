// Deterministic sums over rows: the columns are split into fixed blocks, one task per block, and each task
// walks the rows in order. Every column is then summed in the same order, to the same bits, whatever the
// thread count, and the inner loop over a block's columns stays contiguous for the vector units.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mt::kernels {

// Wide enough for whole AVX-512 vectors, narrow enough that C = 768 still splits into 12 tasks.
constexpr int64_t kColumnBlock = 64;

// Calls body(j0, j1) for each block [j0, j1) of [0, n_cols), in parallel over blocks.
template <typename Body>
void parallel_over_column_blocks(int64_t n_cols, const Body& body) {
  const int64_t blocks = (n_cols + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kColumnBlock;
    body(j0, std::min(n_cols, j0 + kColumnBlock));
  }
}

}  // namespace mt::kernels
