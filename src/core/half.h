// 16-bit floating-point storage types. Tensors are stored as bf16 or f16, but all arithmetic happens in fp32:
// kernels load with to_f32 and store with round_to<T> (nearest even) or stochastic_round (unbiased).
#pragma once

#include <bit>
#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"

#if defined(__CUDA_ARCH__)
#include <cuda_fp16.h>
#endif

namespace mt {

// bfloat16: the top half of an fp32 (8 exponent bits, 7 mantissa bits).
struct bf16 {
  uint16_t bits;
};

// IEEE binary16 (5 exponent bits, 10 mantissa bits); converted by the hardware's F16C instructions.
struct f16 {
  uint16_t bits;
};
// The compiler's binary16 type. GCC before 13 has _Float16 in C++ only on x86; aarch64's __fp16 is the same
// IEEE format, converted by FCVT (nearest even).
#if defined(__aarch64__)
using native_f16 = __fp16;
#else
using native_f16 = _Float16;
#endif

MT_HOST_DEVICE inline float to_f32(float x) {
  return x;
}
MT_HOST_DEVICE inline float to_f32(bf16 x) {
  return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16);
}
// Both conversions are exact.
MT_HOST_DEVICE inline float to_f32(f16 x) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(x.bits));
#else
  return static_cast<float>(std::bit_cast<native_f16>(x.bits));
#endif
}

// Round to nearest, ties to even; NaN stays NaN, overflow becomes inf.
template <typename T>
MT_HOST_DEVICE T round_to(float x);

template <>
MT_HOST_DEVICE inline float round_to<float>(float x) {
  return x;
}
template <>
MT_HOST_DEVICE inline bf16 round_to<bf16>(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};  // quiet NaN
  return bf16{static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
// Both nearest even: the GPU's conversion and the host's (F16C, FCVT) give the same bits.
template <>
MT_HOST_DEVICE inline f16 round_to<f16>(float x) {
#if defined(__CUDA_ARCH__)
  return f16{__half_as_ushort(__float2half_rn(x))};
#else
  return f16{std::bit_cast<uint16_t>(static_cast<native_f16>(x))};
#endif
}

// Stochastic rounding to bf16: rounds up with probability equal to the distance from the value below, so
// the expected result equals x. `random` supplies the 16 random bits (its low half is used).
MT_HOST_DEVICE inline bf16 stochastic_round(float x, uint32_t random) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  return bf16{static_cast<uint16_t>((u + (random & 0xffffu)) >> 16)};
}

// The storage type of a DType, for code that dispatches once on a run's dtype.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;  // the step's loss scalar
}

}  // namespace mt
