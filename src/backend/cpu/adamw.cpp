// AdamW in torch.optim.AdamW's order of operations, and the reductions gradient-norm clipping needs.
#include "backend/cpu/adamw.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "backend/cpu/isa_variant.h"
#include "core/rng.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

// sum_of_squares reduces chunks of this many elements, then adds the chunk sums in index order.
constexpr int64_t kSquaresChunk = 4096;

// One random stream per stochastically rounded quantity, so that m, v and the weight of an element round
// independently. Changing these changes every no-master-weights run.
constexpr uint64_t kStreamM = hash_name("adamw.m");
constexpr uint64_t kStreamV = hash_name("adamw.v");
constexpr uint64_t kStreamWeight = hash_name("adamw.weight");

// The fused multiply-adds are written out as GCC contracted them in the scalar loop that set the fp32
// results. Left implicit, a vectorized body and its scalar remainder may contract differently, and which
// elements fall in the remainder depends on the thread count.

// torch's lerp: the form with the smaller weight keeps the rounding error small.
inline float lerp(float self, float end, float weight) {
  return weight < 0.5f ? std::fma(weight, end - self, self) : std::fma(-(end - self), 1.0f - weight, end);
}

// The per-step scalars. They are Python floats (doubles) in torch, rounded to float where they meet a tensor.
struct Coefficients {
  explicit Coefficients(const AdamWStep& s) {
    const double lr = s.lr, beta1 = s.beta1, beta2 = s.beta2;
    const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(s.step));
    const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(s.step));
    decay = static_cast<float>(1.0 - lr * s.weight_decay);
    m_weight = static_cast<float>(1.0 - beta1);
    v_keep = s.beta2;
    v_weight = static_cast<float>(1.0 - beta2);
    neg_step_size = static_cast<float>(-(lr / bias_correction1));
    bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    eps = s.eps;
    grad_multiplier = s.grad_multiplier;
  }
  float decay, m_weight, v_keep, v_weight, neg_step_size, bias_correction2_sqrt, eps, grad_multiplier;
};

// Where the updated weight comes from and goes to.
enum class Weights {
  in_place,    // fp32 param, read and written
  master,      // read from the fp32 master; written to it and, rounded to nearest, to param
  stochastic,  // bf16 param, read and written with stochastic rounding (no master copy)
};

template <bool kStochastic, typename M>
inline M store_moment(float x, uint64_t seed, uint64_t stream, uint64_t index) {
  if constexpr (kStochastic) {
    return stochastic_round(x, static_cast<uint32_t>(random_bits(seed, stream, index)));
  } else {
    return round_to<M>(x);
  }
}

// One fused pass. The step uses the fp32 moments before they are rounded for storage. Every random draw is
// a function of the element's global index, never of the thread that handles it.
template <Weights kWeights, bool kStochasticMoments, typename P, typename G, typename M>
void update(float* master, P* param, const G* grad, M* m, M* v, int64_t n, const Coefficients& c,
            uint64_t seed, uint64_t index) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t at = index + static_cast<uint64_t>(i);
    const float g = to_f32(grad[i]) * c.grad_multiplier;
    const float p = (kWeights == Weights::master ? master[i] : to_f32(param[i])) * c.decay;
    const float mi = lerp(to_f32(m[i]), g, c.m_weight);
    const float vi = std::fma(to_f32(v[i]), c.v_keep, c.v_weight * g * g);
    const float denom = std::sqrt(vi) / c.bias_correction2_sqrt + c.eps;
    m[i] = store_moment<kStochasticMoments, M>(mi, seed, kStreamM, at);
    v[i] = store_moment<kStochasticMoments, M>(vi, seed, kStreamV, at);
    const float w = std::fma(c.neg_step_size, mi / denom, p);
    if constexpr (kWeights == Weights::master) {
      master[i] = w;
      param[i] = round_to<P>(w);
    } else if constexpr (kWeights == Weights::stochastic) {
      param[i] = stochastic_round(w, static_cast<uint32_t>(random_bits(seed, kStreamWeight, at)));
    } else {
      param[i] = w;
    }
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
  if (master) {
    update_with_rounding<Weights::master>(rounding, master, param, grad, m, v, n, c);
  } else if constexpr (std::is_same_v<P, float>) {
    update_with_rounding<Weights::in_place>(rounding, master, param, grad, m, v, n, c);
  } else if constexpr (std::is_same_v<P, bf16>) {
    update_with_rounding<Weights::stochastic>(rounding, master, param, grad, m, v, n, c);
  } else {
    // Training without master weights is a bf16 mode: stochastic_round produces bf16 only.
    throw std::invalid_argument("adamw_update: f16 weights need an fp32 master copy");
  }
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
