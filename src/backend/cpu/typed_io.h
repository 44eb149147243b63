// Loads from and stores to a storage type (float, bf16 or f16), for kernels that compute in fp32 whatever
// the storage. Every conversion here gives the result of half.h's to_f32 or round_to (round to nearest
// even, overflow to inf), NaN payloads aside; they are faster ways to the same bits.
//
// widen and narrow convert one value, in forms GCC vectorizes: half.h converts f16 through _Float16, which
// GCC 12 keeps scalar unless the CPU has AVX512-FP16, and one scalar conversion keeps the whole loop around
// it scalar. The f16 versions here use integer operations instead, computing every case and selecting one
// without branches.
//
// convert_n converts a row with the CPU's conversion instructions where the level has them
// (AVX-512 for f16 and, with AVX512-BF16, bf16; F16C at avx2): one instruction per 8 to 32 values instead
// of about ten integer operations each, which decides whether a 16-bit kernel keeps up with its fp32
// version.
//
// load_row, read_row, output_row and store_row let one kernel body serve every storage type: fp32 rows are
// used in place, 16-bit rows go through fp32 buffers where that is faster.
#pragma once

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include <bit>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/isa_variant.h"
#include "core/half.h"

namespace mt::kernels::MT_ISA {

template <typename T>
inline float widen(T x) {
  return to_f32(x);
}

template <>
inline float widen<f16>(f16 x) {
  const uint32_t em = (x.bits & 0x7fffu) << 13;  // exponent and mantissa, in fp32 position
  const uint32_t exp = em & 0x0f800000u;
  // Rebias the exponent by 127 - 15; inf and NaN get the top exponent. A subnormal m * 2^-24 (or zero) is
  // given exponent 2^-14, which makes it 2^-14 + m * 2^-24, and loses that 2^-14 in an exact subtraction.
  const uint32_t r =
      em + 0x38000000u + (exp == 0x0f800000u ? 0x38000000u : 0u) + (exp == 0 ? 0x00800000u : 0u);
  const float f = std::bit_cast<float>(r) - (exp == 0 ? 0x1p-14f : 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | static_cast<uint32_t>(x.bits & 0x8000u) << 16);
}

template <typename T>
inline T narrow(float x) {
  return round_to<T>(x);
}

template <>
inline f16 narrow<f16>(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t a = u & 0x7fffffffu;
  // Normal results: rebias the exponent (the constant is -112 << 23 plus a rounding bias of 0xfff) and
  // round the 13 dropped bits to nearest even; a carry out of the mantissa correctly reaches inf.
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
  // Below 2^-14 the result is subnormal: adding 0.5 makes the FPU round to a multiple of 2^-24, which then
  // sits in the low mantissa bits.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  const uint32_t inf_nan = a > 0x7f800000u ? 0x7e00u : 0x7c00u;  // from 65536 on
  const uint32_t h = a >= 0x47800000u ? inf_nan : a < 0x38800000u ? subnormal : normal;
  return f16{static_cast<uint16_t>(h | (u >> 16 & 0x8000u))};
}

#if defined(__AVX512F__) || defined(__F16C__)
// f16 <-> fp32 of kF16Lanes values with the level's conversion instructions, rounding to nearest even.
constexpr int kF16Round = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#ifdef __AVX512F__
constexpr int64_t kF16Lanes = 16;
// The masked forms: GCC 12's unmasked ones trip -Wmaybe-uninitialized.
constexpr __mmask16 kAllLanes = 0xffff;
inline void convert_f16_lanes(float* dst, const f16* src) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  _mm512_storeu_ps(dst, _mm512_maskz_cvtph_ps(kAllLanes, h));
}
inline void convert_f16_lanes(f16* dst, const float* src) {
  const __m256i h = _mm512_maskz_cvtps_ph(kAllLanes, _mm512_loadu_ps(src), kF16Round);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
}
#else
constexpr int64_t kF16Lanes = 8;
inline void convert_f16_lanes(float* dst, const f16* src) {
  _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
}
inline void convert_f16_lanes(f16* dst, const float* src) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_cvtps_ph(_mm256_loadu_ps(src), kF16Round));
}
#endif
#endif

#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
// dst[i] = narrow<bf16>(src[i]) for the first values, 32 at a time; returns how many it converted.
inline int64_t narrow_bf16_lanes(bf16* dst, const float* src, int64_t n) {
  int64_t i = 0;
  // The instruction flushes subnormal inputs to zero, which round_to<bf16> does not: the rare block that
  // holds one (fpclass 0x20: denormal) is rounded value by value.
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
    if (_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)) {
      for (int64_t j = i; j < i + 32; ++j) dst[j] = narrow<bf16>(src[j]);
    } else {
      _mm512_storeu_si512(dst + i, std::bit_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
  }
  return i;
}
#endif

// dst[i] = src[i] for i < n, widened to fp32 or narrowed from it.
template <typename To, typename From>
inline void convert_n(To* dst, const From* src, int64_t n) {
  static_assert(std::is_same_v<To, float> != std::is_same_v<From, float>, "one side is fp32");
  int64_t i = 0;
#if defined(__AVX512F__) || defined(__F16C__)
  if constexpr (std::is_same_v<To, f16> || std::is_same_v<From, f16>)
    for (; i + kF16Lanes <= n; i += kF16Lanes) convert_f16_lanes(dst + i, src + i);
#endif
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  if constexpr (std::is_same_v<To, bf16>) i = narrow_bf16_lanes(dst, src, n);
#endif
#pragma omp simd
  for (int64_t j = i; j < n; ++j) {
    if constexpr (std::is_same_v<To, float>)
      dst[j] = widen(src[j]);
    else
      dst[j] = narrow<To>(src[j]);
  }
}

// A row of n values as fp32: in place for fp32, else widened into buf.
template <typename T>
inline const float* load_row(const T* row, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return row;
  } else {
    convert_n(buf, row, n);
    return buf;
  }
}

// A row of n values for a loop that reads each with widen(), once or a few times: f16 rows are widened into
// buf by the conversion instructions, fp32 and bf16 rows are read in place (widening a bf16 value is one
// shift, cheaper than a trip through memory).
template <typename T>
inline auto read_row(const T* row, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, f16>) {
    convert_n(buf, row, n);
    return static_cast<const float*>(buf);
  } else {
    return row;
  }
}

// Where to compute a row of output in fp32: in place for fp32, else in buf, for store_row to round out.
template <typename T>
inline float* output_row(T* row, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return row;
  } else {
    return buf;
  }
}

template <typename T>
inline void store_row(T* row, const float* values, int64_t n) {
  if constexpr (!std::is_same_v<T, float>) convert_n(row, values, n);
}

}  // namespace mt::kernels::MT_ISA
