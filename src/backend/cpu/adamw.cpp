// AdamW in torch.optim.AdamW's order of operations, and the reductions gradient-norm clipping needs.
#include "backend/cpu/adamw.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "backend/cpu/adamw_math.h"
#include "backend/cpu/isa_variant.h"
#include "core/rng.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

// sum_of_squares reduces chunks of this many elements, then adds the chunk sums in index order.
constexpr int64_t kSquaresChunk = 4096;

// One fused pass. The step uses the fp32 moments before they are rounded for storage. Every random draw is
// a function of the element's global index, never of the thread that handles it.
template <Weights kWeights, bool kStochasticMoments, typename P, typename G, typename M>
void update(float* master, P* param, const G* grad, M* m, M* v, int64_t n, const Coefficients& c,
            uint64_t seed, uint64_t index) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t at = index + static_cast<uint64_t>(i);
    const ElementStep e = adamw_element(load_weight<kWeights>(master, param, i), to_f32(grad[i]),
                                        to_f32(m[i]), to_f32(v[i]), c);
    m[i] = round_moment<kStochasticMoments, M>(e.m, seed, kStreamFirstMoment, at);
    v[i] = round_moment<kStochasticMoments, M>(e.v, seed, kStreamSecondMoment, at);
    store_weight<kWeights>(master, param, i, e.weight, seed, at);
  }
}

template <Weights kWeights, typename P, typename G, typename M>
void update_with_rounding(const AdamWRounding& rounding, float* master, P* param, const G* grad, M* m, M* v,
                          int64_t n, const Coefficients& c) {
  const uint64_t index = static_cast<uint64_t>(rounding.index);
  if constexpr (std::is_same_v<M, bf16>) {
    if (rounding.stochastic_moments) {
      return update<kWeights, true>(master, param, grad, m, v, n, c, rounding.seed, index);
    }
  }
  update<kWeights, false>(master, param, grad, m, v, n, c, rounding.seed, index);
}

}  // namespace

template <typename P, typename G, typename M>
void adamw_update(float* master, P* param, const G* grad, M* m, M* v, int64_t n, const AdamWStep& s,
                  const AdamWRounding& rounding) {
  const Coefficients c(s);
  with_weights<P>(master, [&](auto weights) {
    update_with_rounding<decltype(weights)::value>(rounding, master, param, grad, m, v, n, c);
  });
}

template <typename G>
double sum_of_squares(const G* x, int64_t n) {
  const int64_t chunks = (n + kSquaresChunk - 1) / kSquaresChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i0 = c * kSquaresChunk, i1 = std::min(n, i0 + kSquaresChunk);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = i0; i < i1; ++i) {
      const double xi = to_f32(x[i]);
      sum += xi * xi;
    }
    partial[c] = sum;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
template <typename P, typename G, typename M>
void adamw_update(float* master, P* param, const G* grad, M* m, M* v, int64_t n, const AdamWStep& s,
                  const AdamWRounding& rounding) {
  dispatch<&adamw_update<P, G, M>>(master, param, grad, m, v, n, s, rounding);
}
template <typename G>
double sum_of_squares(const G* x, int64_t n) {
  return dispatch<&sum_of_squares<G>>(x, n);
}

#define MT_INSTANTIATE_ADAMW(P, G, M)                                                          \
  template void adamw_update<P, G, M>(float*, P*, const G*, M*, M*, int64_t, const AdamWStep&, \
                                      const AdamWRounding&);
// Every weight type with fp32 or bf16 gradients and fp32 or bf16 moments.
#define MT_INSTANTIATE_ADAMW_MOMENTS(P, G) MT_INSTANTIATE_ADAMW(P, G, float) MT_INSTANTIATE_ADAMW(P, G, bf16)
#define MT_INSTANTIATE_ADAMW_GRADS(P) \
  MT_INSTANTIATE_ADAMW_MOMENTS(P, float) MT_INSTANTIATE_ADAMW_MOMENTS(P, bf16)
MT_INSTANTIATE_ADAMW_GRADS(float)
MT_INSTANTIATE_ADAMW_GRADS(bf16)
MT_INSTANTIATE_ADAMW_GRADS(f16)
#undef MT_INSTANTIATE_ADAMW_GRADS
#undef MT_INSTANTIATE_ADAMW_MOMENTS
#undef MT_INSTANTIATE_ADAMW
template double sum_of_squares<float>(const float*, int64_t);
template double sum_of_squares<bf16>(const bf16*, int64_t);
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
// Weights of every storage type, gradients and moments fp32 or bf16.
template <typename P>
bool enroll_weights() {
  return enroll<&kernels::adamw_update<P, float, float>>(adamw_update) &&
         enroll<&kernels::adamw_update<P, float, bf16>>(adamw_update) &&
         enroll<&kernels::adamw_update<P, bf16, float>>(adamw_update) &&
         enroll<&kernels::adamw_update<P, bf16, bf16>>(adamw_update);
}
const bool enrolled = enroll_weights<float>() && enroll_weights<bf16>() && enroll_weights<f16>() &&
                      enroll<&kernels::sum_of_squares<float>>(sum_of_squares) &&
                      enroll<&kernels::sum_of_squares<bf16>>(sum_of_squares);
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
