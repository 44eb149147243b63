// The sum of squares that gradient clipping and the overflow check need, in double and a fixed order: two
// runs give the same bits (not necessarily the CPU's: its chunks are summed differently).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"

namespace mt::cuda {

// Elements per chunk (one thread block each), and chunks per launch: the scratch holds one double per chunk
// of a launch, 64 KiB; longer inputs take several launches, each folded into *sum in order.
constexpr int64_t kSquaresChunk = 4096;
constexpr int64_t kSquaresMaxChunks = 8192;
constexpr int64_t kSquaresScratchDoubles = kSquaresMaxChunks;

// *sum (device memory) = the sum over i < n of double(x[i])^2: each chunk reduced by a fixed tree, the
// chunks' sums added in index order. Non-finite when an element is. scratch: kSquaresScratchDoubles doubles.
template <typename G>
void sum_of_squares(const G* x, int64_t n, double* scratch, double* sum, cudaStream_t stream);

}  // namespace mt::cuda
