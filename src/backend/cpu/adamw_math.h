// AdamW's arithmetic for one element, shared by the kernels that store the moments differently (adamw.cpp:
// fp32 or bf16; adamw_8bit.cpp: 8-bit blocks), so that every storage runs the same fp32 operations in the
// same order. Included by each ISA level's build, so it is in that level's namespace.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "backend/cpu/adamw.h"
#include "backend/cpu/isa_variant.h"
#include "core/half.h"
#include "core/rng.h"

namespace mt::kernels::MT_ISA {

// The random stream of master-less bf16 weights' stochastic rounding. Changing it changes every
// no-master-weights run.
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

// The coefficients of a call whose tensors differ in weight decay: s's, or none.
struct RunCoefficients {
  explicit RunCoefficients(AdamWStep s) : decayed(s), undecayed((s.weight_decay = 0, s)) {}
  Coefficients decayed, undecayed;
};

// One element's step: the new moments (before any rounding for storage: the step uses these) and weight.
struct ElementStep {
  float m, v, weight;
};
// The step from the new second moment vi (the element's own, or its Adam-mini block's) and the unscaled g.
inline ElementStep adam_element(float weight, float g, float m, float vi, const Coefficients& c) {
  const float p = weight * c.decay;
  const float mi = lerp(m, g, c.m_weight);
  const float denom = std::sqrt(vi) / c.bias_correction2_sqrt + c.eps;
  return {mi, vi, std::fma(c.neg_step_size, mi / denom, p)};
}
inline ElementStep adamw_element(float weight, float grad, float m, float v, const Coefficients& c) {
  const float g = grad * c.grad_multiplier;
  return adam_element(weight, g, m, std::fma(v, c.v_keep, c.v_weight * g * g), c);
}

// Where the updated weight comes from and goes to.
enum class Weights {
  in_place,    // fp32 param, read and written
  master,      // read from the fp32 master; written to it and, rounded to nearest, to param
  stochastic,  // bf16 param, read and written with stochastic rounding (no master copy)
};

template <Weights kWeights, typename P>
inline float load_weight(const float* master, const P* param, int64_t i) {
  return kWeights == Weights::master ? master[i] : to_f32(param[i]);
}

// `at` is the element's index in the whole parameter buffer: the stochastic rounding's bits follow it.
template <Weights kWeights, typename P>
inline void store_weight(float* master, P* param, int64_t i, float w, uint64_t seed, uint64_t at) {
  if constexpr (kWeights == Weights::master) {
    master[i] = w;
    param[i] = round_to<P>(w);
  } else if constexpr (kWeights == Weights::stochastic) {
    param[i] = stochastic_round(w, static_cast<uint32_t>(random_bits(seed, kStreamWeight, at)));
  } else {
    param[i] = w;
  }
}

// Calls f(std::integral_constant<Weights, ...>) for the storage of the weights: the master when there is one,
// else the fp32 weights in place, else bf16 weights rounded stochastically.
template <typename P, typename F>
void with_weights(const float* master, const F& f) {
  if (master) {
    f(std::integral_constant<Weights, Weights::master>{});
  } else if constexpr (std::is_same_v<P, float>) {
    f(std::integral_constant<Weights, Weights::in_place>{});
  } else if constexpr (std::is_same_v<P, bf16>) {
    f(std::integral_constant<Weights, Weights::stochastic>{});
  } else {
    // Training without master weights is a bf16 mode: stochastic_round produces bf16 only.
    throw std::invalid_argument("adamw_update: f16 weights need an fp32 master copy");
  }
}

}  // namespace mt::kernels::MT_ISA
