// The sum of squares: a kernel that reduces each chunk in a fixed tree (a thread's strided elements in
// order, then warp shuffles, then the warps' sums), and one block that adds the chunks' sums the same way
// and folds them into the running total. No atomics: the order never depends on scheduling.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/reduce.cuh"

namespace mt::cuda {

namespace {

constexpr int kSquaresThreads = 256;
constexpr int kWarps = kSquaresThreads / 32;

// The block's sum of each thread's `value`, in a fixed order; valid in thread 0.
__device__ double block_sum(double value) {
  __shared__ double warp_sums[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  value = lane < kWarps ? warp_sums[lane] : 0.0;
  if (warp == 0)
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

// partials[c] = chunk c's sum of squares (elements [c * kSquaresChunk, ...) of x, n of them in all).
template <typename G>
__global__ void __launch_bounds__(kSquaresThreads)
    chunk_squares_kernel(const G* __restrict__ x, int64_t n, double* __restrict__ partials) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kSquaresChunk;
  const int64_t end = min(n, first + kSquaresChunk);
  double sum = 0;
  for (int64_t i = first + threadIdx.x; i < end; i += kSquaresThreads) {
    const double xi = to_f32(x[i]);
    sum += xi * xi;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// *sum = (accumulate ? *sum : 0) + the sum of partials[0, chunks). One block.
__global__ void __launch_bounds__(kSquaresThreads)
    fold_chunks_kernel(const double* __restrict__ partials, int64_t chunks, bool accumulate, double* sum) {
  double part = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += kSquaresThreads) part += partials[c];
  part = block_sum(part);
  if (threadIdx.x == 0) *sum = (accumulate ? *sum : 0.0) + part;
}

}  // namespace

template <typename G>
void sum_of_squares(const G* x, int64_t n, double* scratch, double* sum, cudaStream_t stream) {
  constexpr int64_t kPerLaunch = kSquaresChunk * kSquaresMaxChunks;
  int64_t first = 0;
  do {  // at least once: n == 0 sets *sum = 0
    const int64_t count = std::min(kPerLaunch, n - first);
    const int64_t chunks = (count + kSquaresChunk - 1) / kSquaresChunk;
    if (chunks > 0) {
      chunk_squares_kernel<<<static_cast<unsigned>(chunks), kSquaresThreads, 0, stream>>>(x + first, count,
                                                                                          scratch);
      check_launch("sum_of_squares");
    }
    fold_chunks_kernel<<<1, kSquaresThreads, 0, stream>>>(scratch, chunks, first > 0, sum);
    check_launch("sum_of_squares");
    first += count;
  } while (first < n);
}

template void sum_of_squares<float>(const float*, int64_t, double*, double*, cudaStream_t);
template void sum_of_squares<bf16>(const bf16*, int64_t, double*, double*, cudaStream_t);

}  // namespace mt::cuda
