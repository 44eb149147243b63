// One block of a block-quantized moment (block_quant.h), for the kernels that read and write them: the block
// quantizer, the dequantizer, and the per-level loops they use. Included by each ISA level's build, so it is
// in that level's namespace.
//
// Every level writes the same bytes: exact_code's, the definition (one fp32 division, then nearest_code or
// round_to_e4m3). The AVX-512 build runs 16 elements a vector, with the same result:
//   e4m3: the division and round_to_e4m3's bit arithmetic, on vectors.
//   int8: no division and no table lookup per element. It multiplies by the block's reciprocal (the product
//     is within 1 ulp of the exact quotient, 2 at most; the fp32 steps are counted in kSearchUlps), then
//     computes the code from the map's decade layout (dynamic_map.h: DynamicMapSearch) and flags every
//     element that lies within kSearchUlps + 1 of a decade boundary or whose in-decade position is within
//     kSearchPositionMargin of a threshold, and every positive one whose product is under 2^-100 (the exact
//     quotient might be 0). The flagged ones, about 1 in 1000 of Adam's moments, take exact_code. That the
//     unflagged codes are exact was checked for every fp32 quotient in [-1, 1] (an exhaustive loop over the
//     2^31 values, see bench/results/adamw_8bit.md); tests/unit checks every threshold's neighbourhood at
//     scales from 2^-120 to 2^120 (KernelMomentQuant.BytesAreTheDefinitionsNearEveryEdgeAndAtAnyScale).
//     Blocks whose scale is out of [2^-100, 2^100] take exact_code throughout.
//   dequantizing: the map's values as two 16-bit tables in registers (permutes of 32 codes at a time), e4m3
//     through fp16 (vcvtph2ps), times the scale: the same products.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "backend/cpu/block_quant.h"
#include "backend/cpu/dynamic_map.h"
#include "backend/cpu/isa_variant.h"
#include "core/fp8.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#include <immintrin.h>
#define MT_MOMENT_CODEC_AVX512 1
// The vector helpers take and return registers: a call would pass them through memory.
#define MT_ALWAYS_INLINE inline __attribute__((always_inline))
#endif

namespace mt::kernels::MT_ISA {

// The largest |x[i]|, NaN if any x[i] is NaN. Compared as integers: the bits of non-negative floats order as
// their values, and every NaN's are above infinity's, so the maximum is one integer reduction (std::max on
// floats would drop a NaN, depending on the order).
inline float block_absmax(const float* x, int64_t n) {
  uint32_t largest = 0;
#pragma omp simd reduction(max : largest)
  for (int64_t i = 0; i < n; ++i) largest = std::max(largest, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  return std::bit_cast<float>(largest);
}

// The block's scale from its absmax.
inline float block_scale(MomentCodec c, float absmax) {
  return c == MomentCodec::e4m3 ? absmax / kE4m3Max : absmax;
}

inline const DynamicMap& dynamic_map_of(MomentCodec c) {
  return c == MomentCodec::dynamic_signed ? signed_dynamic_map() : unsigned_dynamic_map();
}

// The definition of an element's byte in a block of positive scale: its quotient by the scale, coded. A
// second moment above zero keeps at least the smallest positive code: read back as 0 beside a first moment
// that survived, it would make the update m / eps.
inline uint8_t exact_code(MomentCodec c, float x, float scale) {
  const float v = x / scale;
  if (c == MomentCodec::e4m3) return round_to_e4m3(v).bits;
  const uint8_t code = nearest_code(dynamic_map_of(c), v);
  return code == 0 && v > 0 && c == MomentCodec::dynamic_unsigned ? 1 : code;
}

#ifdef MT_MOMENT_CODEC_AVX512

// GCC 12's unmasked forms of these trip -Wmaybe-uninitialized; the zero-masked ones with every lane set are
// the same instructions.
constexpr __mmask16 kEveryLane = 0xffff;
MT_ALWAYS_INLINE __m512i srli32(__m512i a, unsigned n) {
  return _mm512_maskz_srli_epi32(kEveryLane, a, n);
}
MT_ALWAYS_INLINE __m512i max32(__m512i a, __m512i b) {
  return _mm512_maskz_max_epi32(kEveryLane, a, b);
}
MT_ALWAYS_INLINE __m512i min32(__m512i a, __m512i b) {
  return _mm512_maskz_min_epi32(kEveryLane, a, b);
}
MT_ALWAYS_INLINE __m512i abs32(__m512i a) {
  return _mm512_maskz_abs_epi32(kEveryLane, a);
}
MT_ALWAYS_INLINE __m512i truncate32(__m512 a) {
  return _mm512_maskz_cvttps_epi32(kEveryLane, a);
}
MT_ALWAYS_INLINE __m512i lookup32(__m512i index, __m512i table) {
  return _mm512_maskz_permutexvar_epi32(kEveryLane, index, table);
}
MT_ALWAYS_INLINE __m512 lookup32(__m512i index, __m512 table) {
  return _mm512_maskz_permutexvar_ps(kEveryLane, index, table);
}

// Where the vector quotient is trusted (block_codec.h's header comment).
MT_ALWAYS_INLINE bool vector_scale(float scale) {
  return scale >= 0x1p-100f && scale <= 0x1p100f;
}

// Codes of 16 quotients q (approximate: within 2 ulps of the exact ones) as 32-bit lanes, and in doubt the
// lanes that exact_code must do instead. x_nonzero: the lanes whose element is not +-0 (a quotient that
// underflowed may hide a positive second moment).
struct VectorCodes {
  __m512i code;
  __mmask16 doubt;
};

template <MomentCodec kCodec>
MT_ALWAYS_INLINE VectorCodes dynamic_codes(const DynamicMapSearch& s, __m512 q, __mmask16 x_nonzero) {
  const __m512i bits = _mm512_castps_si512(q);
  const __m512i a = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __m512i binade = min32(
      max32(_mm512_sub_epi32(srli32(a, 23), _mm512_set1_epi32(kSearchFirstBinade)), _mm512_setzero_si512()),
      _mm512_set1_epi32(31));
  const __m512i entry = _mm512_permutex2var_epi32(_mm512_load_si512(s.binade.data()), binade,
                                                  _mm512_load_si512(s.binade.data() + 16));
  const __m512i mantissa = _mm512_and_si512(a, _mm512_set1_epi32(0x7fffff));
  const __m512i boundary = _mm512_and_si512(entry, _mm512_set1_epi32(0x1ffffff));
  const __m512i bottom_state = srli32(entry, 25);
  const __m512i state = _mm512_mask_add_epi32(bottom_state, _mm512_cmpge_epi32_mask(mantissa, boundary),
                                              bottom_state, _mm512_set1_epi32(1));
  // One ulp more: where a midpoint is an fp32 value, the negative side's code changes one ulp below it.
  __mmask16 doubt = _mm512_cmple_epi32_mask(abs32(_mm512_sub_epi32(mantissa, boundary)),
                                            _mm512_set1_epi32(kSearchUlps + 1));
  const __m512 position =
      _mm512_fmadd_ps(_mm512_castsi512_ps(a), lookup32(state, _mm512_load_ps(s.slope.data())),
                      lookup32(state, _mm512_load_ps(s.offset.data())));
  const __m512 from_whole = _mm512_abs_ps(_mm512_reduce_ps(position, _MM_FROUND_TO_NEAREST_INT));
  doubt |= _mm512_cmplt_ps_mask(from_whole, _mm512_set1_ps(kSearchPositionMargin));
  const __m512i info = lookup32(state, _mm512_load_si512(s.code.data()));
  const __m512i step = min32(truncate32(position), srli32(info, 16));
  const __m512i magnitude = _mm512_add_epi32(_mm512_and_si512(info, _mm512_set1_epi32(0xffff)), step);
  const __mmask16 negative = _mm512_movepi32_mask(bits);
  if constexpr (kCodec == MomentCodec::dynamic_signed) {
    const __m512i zero_code = _mm512_set1_epi32(127);
    // Positive: zero_code + magnitude; negative: zero_code - magnitude, the most negative value below -1's.
    const __m512i code = _mm512_mask_sub_epi32(_mm512_add_epi32(magnitude, zero_code), negative, zero_code,
                                               min32(magnitude, zero_code));
    return {code, doubt};
  } else {
    // Positive: the magnitude code, at least 1 above zero; negative: 0. A quotient under 2^-100 of a non-zero
    // element may have underflowed the other way.
    const __mmask16 positive = _mm512_cmpneq_epi32_mask(a, _mm512_setzero_si512()) & ~negative;
    const __m512i code = _mm512_maskz_max_epi32(positive, magnitude, _mm512_set1_epi32(1));
    doubt |= _mm512_mask_cmplt_epi32_mask(x_nonzero & ~negative, a, _mm512_set1_epi32(0x0d800000));  // 2^-100
    return {code, doubt};
  }
}

// round_to_e4m3 of 16 finite quotients, as 32-bit lanes: the same bit arithmetic.
MT_ALWAYS_INLINE __m512i e4m3_codes(__m512 q) {
  const __m512i bits = _mm512_castps_si512(q);
  const __m512i a = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __m512i sign = _mm512_and_si512(srli32(bits, 24), _mm512_set1_epi32(0x80));
  const __m512i normal =
      _mm512_sub_epi32(srli32(_mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x7ffff)),
                                               _mm512_and_si512(srli32(a, 20), _mm512_set1_epi32(1))),
                              20),
                       _mm512_set1_epi32(120 << 3));
  const __m512 shift = _mm512_set1_ps(16384.0f);
  const __m512i subnormal = _mm512_sub_epi32(
      _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), shift)), _mm512_castps_si512(shift));
  const __m512i magnitude =
      _mm512_mask_mov_epi32(normal, _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x3c800000)), subnormal);
  // Saturation: from 448 on the normal form only grows (no NaN here: the quotients are finite).
  return _mm512_or_si512(sign, min32(magnitude, _mm512_set1_epi32(0x7e)));
}

// Codes of 16 elements (32-bit lanes) and the lanes exact_code must redo.
template <MomentCodec kCodec>
MT_ALWAYS_INLINE VectorCodes vector_codes(const DynamicMapSearch* search, __m512 x, __m512 scale,
                                          __m512 reciprocal) {
  if constexpr (kCodec == MomentCodec::e4m3) {
    // The division itself: with the bit arithmetic it costs less than checking a product's neighbours.
    return {e4m3_codes(_mm512_div_ps(x, scale)), 0};
  } else {
    const __mmask16 x_nonzero = _mm512_test_epi32_mask(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
    return dynamic_codes<kCodec>(*search, _mm512_mul_ps(x, reciprocal), x_nonzero);
  }
}

// Bytes of 64 codes in 32-bit lanes, in order.
MT_ALWAYS_INLINE __m512i pack_codes(__m512i c0, __m512i c1, __m512i c2, __m512i c3) {
  // The packs interleave 128-bit lanes: byte group 4k + j holds c_j's lane group k.
  const __m512i packed = _mm512_packus_epi16(_mm512_packs_epi32(c0, c1), _mm512_packs_epi32(c2, c3));
  return lookup32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), packed);
}

template <MomentCodec kCodec>
MT_ALWAYS_INLINE void quantize_vector(const float* x, int64_t n, float scale, uint8_t* codes) {
  const __m512 s = _mm512_set1_ps(scale), reciprocal = _mm512_set1_ps(1.0f / scale);
  const DynamicMapSearch* search = kCodec == MomentCodec::e4m3 ? nullptr : &dynamic_map_of(kCodec).search;
  const auto redo = [&](int64_t first, uint32_t doubt) {
    for (; doubt; doubt &= doubt - 1) {
      const int64_t i = first + std::countr_zero(doubt);
      codes[i] = exact_code(kCodec, x[i], scale);
    }
  };
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    VectorCodes v[4];
    for (int k = 0; k < 4; ++k)
      v[k] = vector_codes<kCodec>(search, _mm512_loadu_ps(x + i + 16 * k), s, reciprocal);
    _mm512_storeu_si512(codes + i, pack_codes(v[0].code, v[1].code, v[2].code, v[3].code));
    const uint64_t doubt =
        v[0].doubt | uint64_t{v[1].doubt} << 16 | uint64_t{v[2].doubt} << 32 | uint64_t{v[3].doubt} << 48;
    if (doubt) [[unlikely]]
      for (int k = 0; k < 4; ++k) redo(i + 16 * k, v[k].doubt);
  }
  for (; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const VectorCodes v = vector_codes<kCodec>(search, _mm512_maskz_loadu_ps(live, x + i), s, reciprocal);
    _mm_mask_storeu_epi8(codes + i, live, _mm512_maskz_cvtepi32_epi8(kEveryLane, v.code));
    redo(i, v.doubt & live);
  }
}

// 32 codes' values (16-bit lanes, permuted as dequantize_vector loads them) as the 16-bit halves of their
// fp32 bits: each half is a table of 256 in 8 registers, picked by the code's low 6 bits (permutes of pairs),
// then by bits 6 and 7.
MT_ALWAYS_INLINE __m512i value_halves(const uint16_t* table, __m512i code, __mmask32 bit6, __mmask32 bit7) {
  const auto pair = [&](int k) {
    return _mm512_permutex2var_epi16(_mm512_load_si512(table + 64 * k), code,
                                     _mm512_load_si512(table + 64 * k + 32));
  };
  return _mm512_mask_blend_epi16(bit7, _mm512_mask_blend_epi16(bit6, pair(0), pair(1)),
                                 _mm512_mask_blend_epi16(bit6, pair(2), pair(3)));
}

// values[code] for 32 codes, as elements 0-15 and 16-31.
MT_ALWAYS_INLINE void dynamic_values(const DynamicMapSearch& s, __m256i bytes, __m512& first,
                                     __m512& second) {
  constexpr __mmask32 kEveryWord = 0xffffffff;
  // Word 8k + j of the permuted codes is code 4k + j and word 8k + 4 + j code 16 + 4k + j (j < 4), so that
  // interleaving the halves' 128-bit lanes (unpack) gives the values in order.
  alignas(64) static constexpr uint16_t kOrder[32] = {0,  1,  2,  3,  16, 17, 18, 19, 4,  5,  6,
                                                      7,  20, 21, 22, 23, 8,  9,  10, 11, 24, 25,
                                                      26, 27, 12, 13, 14, 15, 28, 29, 30, 31};
  const __m512i code = _mm512_maskz_permutexvar_epi16(kEveryWord, _mm512_load_si512(kOrder),
                                                      _mm512_maskz_cvtepu8_epi16(kEveryWord, bytes));
  const __mmask32 bit6 = _mm512_test_epi16_mask(code, _mm512_set1_epi16(64));
  const __mmask32 bit7 = _mm512_test_epi16_mask(code, _mm512_set1_epi16(128));
  const __m512i low = value_halves(s.value_low.data(), code, bit6, bit7);
  const __m512i high = value_halves(s.value_high.data(), code, bit6, bit7);
  first = _mm512_castsi512_ps(_mm512_maskz_unpacklo_epi16(kEveryWord, low, high));
  second = _mm512_castsi512_ps(_mm512_maskz_unpackhi_epi16(kEveryWord, low, high));
}

// to_f32 of 16 e4m3 bytes through fp16 (the same fields, 8 more exponent bias, 7 more mantissa bits), so the
// caller multiplies by 256 * scale (exact: a power of two); NaN bytes as to_f32 reads them.
MT_ALWAYS_INLINE __m512 e4m3_values_over_256(__m128i bytes) {
  const __m256i b = _mm256_cvtepu8_epi16(bytes);
  const __m256i half = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8),
                                       _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 7));
  const __m512 value = _mm512_maskz_cvtph_ps(kEveryLane, half);
  const __mmask16 nan =
      _mm256_cmpeq_epi16_mask(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(kE4m3Nan));
  return _mm512_mask_mov_ps(value, nan, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
}

MT_ALWAYS_INLINE void dequantize_vector(MomentCodec c, const uint8_t* codes, float scale, int64_t n,
                                        float* x) {
  if (c == MomentCodec::e4m3) {
    const __m512 scale256 = _mm512_set1_ps(scale * 256.0f);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 live = n - i >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (n - i)) - 1);
      const __m512 v = e4m3_values_over_256(_mm_maskz_loadu_epi8(live, codes + i));
      _mm512_mask_storeu_ps(x + i, live, _mm512_mul_ps(v, scale256));
    }
  } else {
    const DynamicMapSearch& search = dynamic_map_of(c).search;
    const __m512 s = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 32) {
      const __mmask32 live =
          n - i >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1);
      __m512 first, second;
      dynamic_values(search, _mm256_maskz_loadu_epi8(live, codes + i), first, second);
      _mm512_mask_storeu_ps(x + i, static_cast<__mmask16>(live), _mm512_mul_ps(first, s));
      _mm512_mask_storeu_ps(x + i + 16, static_cast<__mmask16>(live >> 16), _mm512_mul_ps(second, s));
    }
  }
}

#endif  // MT_MOMENT_CODEC_AVX512

// Writes x[0, n)'s bytes into codes and returns the block's scale.
inline float quantize_block(MomentCodec c, const float* x, int64_t n, uint8_t* codes) {
  const float scale = block_scale(c, block_absmax(x, n));
  if (!(scale > 0)) {
    const uint8_t zero = zero_code(c);
    for (int64_t i = 0; i < n; ++i) codes[i] = zero;
    return scale;
  }
#ifdef MT_MOMENT_CODEC_AVX512
  if (vector_scale(scale)) {
    switch (c) {
      case MomentCodec::dynamic_signed:
        quantize_vector<MomentCodec::dynamic_signed>(x, n, scale, codes);
        break;
      case MomentCodec::dynamic_unsigned:
        quantize_vector<MomentCodec::dynamic_unsigned>(x, n, scale, codes);
        break;
      case MomentCodec::e4m3:
        quantize_vector<MomentCodec::e4m3>(x, n, scale, codes);
        break;
    }
    return scale;
  }
#endif
  if (c == MomentCodec::e4m3) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) codes[i] = round_to_e4m3(x[i] / scale).bits;
  } else {
    const DynamicMap& map = dynamic_map_of(c);
    const uint8_t least = c == MomentCodec::dynamic_unsigned ? 1 : 0;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i] / scale;
      const uint8_t code = nearest_code(map, v);
      codes[i] = code == 0 && v > 0 ? least : code;
    }
  }
  return scale;
}

inline void dequantize_block(MomentCodec c, const uint8_t* codes, float scale, int64_t n, float* x) {
#ifdef MT_MOMENT_CODEC_AVX512
  if (vector_scale(std::abs(scale)) || scale == 0) {  // so that 256 * scale is exact (and NaN stays NaN)
    dequantize_vector(c, codes, scale, n, x);
    return;
  }
#endif
  if (c == MomentCodec::e4m3) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] = to_f32(fp8_e4m3{codes[i]}) * scale;
  } else {
    const float* values = dynamic_map_of(c).value.data();
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] = values[codes[i]] * scale;
  }
}

}  // namespace mt::kernels::MT_ISA
