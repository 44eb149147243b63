// The AdamW kernel: one element per thread of a grid-stride loop, the shared per-element step, every
// random draw keyed by the element's index in the whole parameter buffer (never by the thread), so the
// results equal the CPU's for any launch shape.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "backend/cuda/adamw.cuh"
#include "backend/cuda/cuda_check.h"
#include "core/adamw_step.h"
#include "core/half.h"
#include "core/rng.h"

namespace mt::cuda {

// This build's copy of the shared arithmetic (its top says why it has no namespace of its own).
#include "core/adamw_element.h"

namespace {

constexpr int kAdamWThreads = 256;
constexpr int64_t kAdamWMaxBlocks = 8192;  // the grid-stride loop covers the rest

// Coefficients arrive by value (kernel parameter space); `index` is element 0's in the parameter buffer.
template <Weights kWeights, bool kStochasticMoments, typename P, typename G, typename M>
__global__ void __launch_bounds__(kAdamWThreads)
    adamw_kernel(float* __restrict__ master, P* __restrict__ param, const G* __restrict__ grad,
                 M* __restrict__ m, M* __restrict__ v, int64_t n, const Coefficients c, uint64_t seed,
                 uint64_t index) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t at = index + static_cast<uint64_t>(i);
    const ElementStep e = adamw_element(load_weight<kWeights>(master, param, i), to_f32(grad[i]),
                                        to_f32(m[i]), to_f32(v[i]), c);
    m[i] = round_moment<kStochasticMoments, M>(e.m, seed, kStreamFirstMoment, at);
    v[i] = round_moment<kStochasticMoments, M>(e.v, seed, kStreamSecondMoment, at);
    store_weight<kWeights>(master, param, i, e.weight, seed, at);
  }
}

template <Weights kWeights, bool kStochasticMoments, typename P, typename G, typename M>
void launch(float* master, P* param, const G* grad, M* m, M* v, int64_t n, const Coefficients& c,
            const AdamWRounding& rounding, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>((n + kAdamWThreads - 1) / kAdamWThreads, kAdamWMaxBlocks);
  adamw_kernel<kWeights, kStochasticMoments><<<static_cast<unsigned>(blocks), kAdamWThreads, 0, stream>>>(
      master, param, grad, m, v, n, c, rounding.seed, static_cast<uint64_t>(rounding.index));
  check_launch("adamw_update");
}

// As the CPU's update_with_rounding: stochastic moments only where they are bf16 and the rounding asks.
template <Weights kWeights, typename P, typename G, typename M>
void launch_with_rounding(float* master, P* param, const G* grad, M* m, M* v, int64_t n,
                          const Coefficients& c, const AdamWRounding& rounding, cudaStream_t stream) {
  if constexpr (std::is_same_v<M, bf16>) {
    if (rounding.stochastic_moments)
      return launch<kWeights, true>(master, param, grad, m, v, n, c, rounding, stream);
  }
  launch<kWeights, false>(master, param, grad, m, v, n, c, rounding, stream);
}

}  // namespace

template <typename P, typename G, typename M>
void adamw_update(float* master, P* param, const G* grad, M* m, M* v, int64_t n, const AdamWStep& s,
                  const AdamWRounding& rounding, cudaStream_t stream) {
  // As the CPU's with_weights: the master when there is one, else fp32 in place, else bf16 stochastic.
  if (master == nullptr && std::is_same_v<P, f16>)
    throw std::invalid_argument("adamw_update: f16 weights need an fp32 master copy");
  if (n <= 0) return;
  const Coefficients c(s);
  if (master) {
    launch_with_rounding<Weights::master>(master, param, grad, m, v, n, c, rounding, stream);
  } else if constexpr (std::is_same_v<P, float>) {
    launch_with_rounding<Weights::in_place>(master, param, grad, m, v, n, c, rounding, stream);
  } else if constexpr (std::is_same_v<P, bf16>) {
    launch_with_rounding<Weights::stochastic>(master, param, grad, m, v, n, c, rounding, stream);
  }
}

#define MT_INSTANTIATE_ADAMW(P, G, M)                                                          \
  template void adamw_update<P, G, M>(float*, P*, const G*, M*, M*, int64_t, const AdamWStep&, \
                                      const AdamWRounding&, cudaStream_t);
// Every weight type with fp32 or bf16 gradients and fp32 or bf16 moments, as the CPU instantiates.
#define MT_INSTANTIATE_ADAMW_MOMENTS(P, G) MT_INSTANTIATE_ADAMW(P, G, float) MT_INSTANTIATE_ADAMW(P, G, bf16)
#define MT_INSTANTIATE_ADAMW_GRADS(P) \
  MT_INSTANTIATE_ADAMW_MOMENTS(P, float) MT_INSTANTIATE_ADAMW_MOMENTS(P, bf16)
MT_INSTANTIATE_ADAMW_GRADS(float)
MT_INSTANTIATE_ADAMW_GRADS(bf16)
MT_INSTANTIATE_ADAMW_GRADS(f16)
#undef MT_INSTANTIATE_ADAMW_GRADS
#undef MT_INSTANTIATE_ADAMW_MOMENTS
#undef MT_INSTANTIATE_ADAMW

}  // namespace mt::cuda
