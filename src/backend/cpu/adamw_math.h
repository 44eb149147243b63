// AdamW's arithmetic for one element, shared by the kernels that store the moments differently (adamw.cpp:
// fp32 or bf16; adamw_8bit.cpp: 8-bit blocks), so that every storage runs the same fp32 operations in the
// same order; the per-element part is core/adamw_element.h, which the GPU's kernels share too. Included by
// each ISA level's build, so it is in that level's namespace.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "backend/cpu/adamw.h"
#include "backend/cpu/isa_variant.h"
#include "core/adamw_step.h"
#include "core/half.h"
#include "core/rng.h"

namespace mt::kernels::MT_ISA {

// The arithmetic the GPU shares (lerp, Coefficients, adam_element, adamw_element, the stochastic rounding's
// streams, load_weight, store_weight), in this level's namespace: see its top.
#include "core/adamw_element.h"

// The coefficients of a call whose tensors differ in weight decay: s's, or none.
struct RunCoefficients {
  explicit RunCoefficients(AdamWStep s) : decayed(s), undecayed((s.weight_decay = 0, s)) {}
  Coefficients decayed, undecayed;
};

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
