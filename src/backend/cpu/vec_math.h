// exp and tanh written so that GCC vectorizes the loops that call them: libm's expf and tanhf stay scalar
// without -ffast-math, and softmax and GELU spend most of their time in them.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "backend/cpu/isa_variant.h"

namespace mt::kernels::MT_ISA {

// exp(x) within about 2 ulp for x in [-87, 88] (inputs outside are clamped, so the result is never 0 or inf).
// x = n*ln2 + r with |r| <= ln2/2, exp(r) by its Taylor series to degree 7, then the exponent bits get n.
inline float vexp(float x) {
  x = std::clamp(x, -87.0f, 88.0f);
  // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without a library call.
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504f + kRound) - kRound;
  // ln2 in two parts: the high part has few bits, so n * kLn2Hi is exact.
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return p * two_n;
}

// tanh(x) = 1 - 2 / (exp(2x) + 1): exact limits at +-inf, absolute error about 1e-7 near 0.
inline float vtanh(float x) {
  return 1.0f - 2.0f / (vexp(2.0f * x) + 1.0f);
}

}  // namespace mt::kernels::MT_ISA
