// The conversion kernel: one element per thread of a grid-stride loop; memory-bound, so plain coalesced
// loads suffice.
#include <algorithm>

#include "backend/cuda/convert.cuh"
#include "backend/cuda/cuda_check.h"

namespace mt::cuda {

namespace {

constexpr int kConvertThreads = 256;
constexpr int64_t kConvertMaxBlocks = 8192;  // the grid-stride loop covers the rest

template <typename To, typename From>
__global__ void convert_kernel(To* __restrict__ dst, const From* __restrict__ src, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = round_to<To>(to_f32(src[i]));
}

}  // namespace

template <typename To, typename From>
void convert(To* dst, const From* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + kConvertThreads - 1) / kConvertThreads, kConvertMaxBlocks);
  convert_kernel<<<static_cast<unsigned>(blocks), kConvertThreads, 0, stream>>>(dst, src, n);
  check_launch("convert");
}

#define MT_INSTANTIATE_CONVERT(To, From) \
  template void convert<To, From>(To*, const From*, int64_t, cudaStream_t);
#define MT_INSTANTIATE_CONVERT_FROM(To) \
  MT_INSTANTIATE_CONVERT(To, float) MT_INSTANTIATE_CONVERT(To, bf16) MT_INSTANTIATE_CONVERT(To, f16)
MT_INSTANTIATE_CONVERT_FROM(float)
MT_INSTANTIATE_CONVERT_FROM(bf16)
MT_INSTANTIATE_CONVERT_FROM(f16)
#undef MT_INSTANTIATE_CONVERT_FROM
#undef MT_INSTANTIATE_CONVERT

}  // namespace mt::cuda
