// Small single-threaded matrix products for the 16-bit attention kernels, C[M,N] (+)= A[M,K] @ B[K,N] with
// fp32 accumulation, and the packing of their operands. They run one (batch, head) block at a time inside
// an OpenMP task: a library call per block would cost as much as the product at these sizes
// (64 x 256 x 64), and oneDNN's cached primitives are not thread-safe.
//
// The depth dimension is counted in lanes of 32 bits. A bf16 lane is a pair of bf16 adjacent in depth (the
// hardware's bf16 dot product multiplies such pairs: AVX512-BF16's vdpbf16ps, 2 products per fp32 lane);
// an fp32 lane is one value. A is row-major [M, K lanes]. B is [K lanes, N], each lane of B pairing two
// depth values of one column ("VNNI" layout). The summation order of every C element is fixed (depth in
// order), so results are the same whatever the blocking, thread count or causal limits. Levels without
// AVX512 (backend/cpu/cpu_isa.h) take the portable loops beside each intrinsic, which GCC vectorizes for
// theirs.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backend/cpu/isa_variant.h"
#include "core/half.h"
#include "core/int_math.h"

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace mt::kernels::MT_ISA {

using v16f = float __attribute__((vector_size(64)));
using v16u = uint32_t __attribute__((vector_size(64)));

// Depth values per lane: 2 for packed bf16 pairs (uint32_t), 1 for fp32.
template <typename Lane>
constexpr int64_t kPack = std::is_same_v<Lane, uint32_t> ? 2 : 1;

// Columns of one vector; every B and C row is padded to a multiple of it, so tiles load and store whole
// vectors (the padding columns hold garbage that is never read back).
constexpr int64_t kVec = 16;

namespace tiles {

// Vectors go by reference: passed or returned by value, 64-byte vectors change the calling convention
// between AVX512 and other builds, which GCC warns about.
inline void load(v16f& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

inline void store(float* p, const v16f& v) {
  std::memcpy(p, &v, sizeof v);
}

// acc += a . b for one lane of a (broadcast) against a vector of B lanes.
inline void step(v16f& acc, uint32_t a, const uint32_t* b) {
  v16u bv;
  std::memcpy(&bv, b, sizeof bv);
  const v16u av = v16u{} + a;
#ifdef __AVX512BF16__
  acc = reinterpret_cast<v16f>(_mm512_dpbf16_ps(reinterpret_cast<__m512>(acc), reinterpret_cast<__m512bh>(av),
                                                reinterpret_cast<__m512bh>(bv)));
#else
  // Without the instruction: widen both halves of each pair (a bf16 is the top half of an fp32); the
  // products are exact in fp32.
  const v16u hi = v16u{} + 0xffff0000u;
  acc += reinterpret_cast<v16f>(av & hi) * reinterpret_cast<v16f>(bv & hi);
  acc += reinterpret_cast<v16f>(av << 16) * reinterpret_cast<v16f>(bv << 16);
#endif
}

inline void step(v16f& acc, float a, const float* b) {
  v16f bv;
  load(bv, b);
  acc += a * bv;  // contracted to an FMA
}

// One MR x (NV * kVec) tile of C over depth K: accumulators stay in registers.
template <typename Lane, int MR, int NV>
void micro(float* C, int64_t ldc, const Lane* A, int64_t lda, const Lane* B, int64_t ldb, int64_t K,
           bool accumulate) {
  v16f acc[MR][NV];
  for (int m = 0; m < MR; ++m) {
    for (int v = 0; v < NV; ++v) {
      acc[m][v] = v16f{};
      if (accumulate) load(acc[m][v], C + m * ldc + v * kVec);
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    const Lane* b = B + k * ldb;
    for (int m = 0; m < MR; ++m) {
      const Lane a = A[m * lda + k];
      for (int v = 0; v < NV; ++v) step(acc[m][v], a, b + v * kVec);
    }
  }
  for (int m = 0; m < MR; ++m) {
    for (int v = 0; v < NV; ++v) store(C + m * ldc + v * kVec, acc[m][v]);
  }
}

#ifdef __AVX512F__
// dst rows 0..15 = columns 0..15 of the 16 x 16 block at src: four rounds of shuffles, each interleaving
// twice as wide a unit (32-bit, 64-bit, then two rounds of 128-bit lanes). The shuffles are used in their
// masked forms: GCC 12's unmasked ones trip -Wmaybe-uninitialized.
inline void transpose16x16(void* dst, int64_t ld_dst, const void* src, int64_t ld_src) {
  constexpr __mmask16 kAll32 = 0xffff;
  constexpr __mmask8 kAll64 = 0xff;
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(static_cast<const uint32_t*>(src) + i * ld_src);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(kAll32, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(kAll32, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_maskz_unpacklo_epi64(kAll64, t[i], t[i + 2]);
    r[i + 1] = _mm512_maskz_unpackhi_epi64(kAll64, t[i], t[i + 2]);
    r[i + 2] = _mm512_maskz_unpacklo_epi64(kAll64, t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_maskz_unpackhi_epi64(kAll64, t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8) {
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_maskz_shuffle_i32x4(kAll32, r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_maskz_shuffle_i32x4(kAll32, r[i + j], r[i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_maskz_shuffle_i32x4(kAll32, t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_maskz_shuffle_i32x4(kAll32, t[j], t[j + 8], 0xdd);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_si512(static_cast<uint32_t*>(dst) + i * ld_dst, r[i]);
}
#endif

// A 6 x 64 tile: 24 accumulators (of 32 registers) hide the product latency, and each depth step loads
// 4 vectors of B and 6 values of A for 24 products.
constexpr int kMR = 6, kNV = 4;
constexpr int64_t kDepth = 128;  // lanes per depth block: a 128 x 64 block of B is 32 KiB, within L1

template <typename Lane>
using Micro = void (*)(float*, int64_t, const Lane*, int64_t, const Lane*, int64_t, int64_t, bool);

// micro<Lane, m + 1, v + 1> at [m][v], for the edge tiles.
template <typename Lane, int... I>
constexpr auto micro_table(std::integer_sequence<int, I...>) {
  return std::array<Micro<Lane>, sizeof...(I)>{&micro<Lane, I / kNV + 1, I % kNV + 1>...};
}

}  // namespace tiles

// How a causal mask limits a product whose row m is query first_row + m: `columns` computes only columns
// (keys) up to the tile's last query (scores), `depth` sums only over depth up to it (probabilities times
// values, whose entries past the diagonal are zero).
enum class Causal { none, columns, depth };

// C[M, N] = A[M, K] @ B[K, N] (+ C with accumulate), K in lanes; row strides lda, ldb, ldc (B's and C's
// multiples of kVec). With a causal limit, entries beyond the limit are left as they were, or hold partial
// sums of zeros, and must not be read.
template <typename Lane>
void tile_product(float* C, int64_t ldc, const Lane* A, int64_t lda, const Lane* B, int64_t ldb, int64_t M,
                  int64_t N, int64_t K, bool accumulate, Causal causal = Causal::none,
                  int64_t first_row = 0) {
  using namespace tiles;
  static constexpr auto table = micro_table<Lane>(std::make_integer_sequence<int, kMR * kNV>{});
  for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
    const int64_t k1 = std::min(K, k0 + kDepth);
    for (int64_t n0 = 0; n0 < N; n0 += kNV * kVec) {
      for (int64_t m0 = 0; m0 < M; m0 += kMR) {
        const int64_t mr = std::min<int64_t>(kMR, M - m0), last_query = first_row + m0 + mr;
        const int64_t n_end = causal == Causal::columns ? std::min(N, last_query) : N;
        const int64_t k_end = causal == Causal::depth ? std::min(k1, ceil_div(last_query, kPack<Lane>)) : k1;
        if (n0 >= n_end || k0 >= k_end) continue;  // done in an earlier depth block, or masked out
        const int64_t nv = std::min<int64_t>(kNV, ceil_div(n_end - n0, kVec));
        table[(mr - 1) * kNV + nv - 1](C + m0 * ldc + n0, ldc, A + m0 * lda + k0, lda, B + k0 * ldb + n0, ldb,
                                       k_end - k0, accumulate || k0 > 0);
      }
    }
  }
}

// The bits of x as a bf16 product operand: rounded to nearest even, NaN kept (quiet), and subnormals
// flushed to signed zero, as AVX512-BF16's conversions and dot products treat them.
inline uint32_t bf16_operand_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return (u & 0x7f800000u) == 0 ? (u >> 16) & 0x8000u : round_to<bf16>(x).bits;
}

// dst[j] = the bf16 lane (x[2j], x[2j + 1]) for j < n / 2, n even: a row of fp32 values in lanes along it.
inline void bf16_lanes_along(uint32_t* dst, const float* x, int64_t n) {
  int64_t j = 0;
#ifdef __AVX512BF16__
  for (; j + kVec <= n / 2; j += kVec) {  // one conversion rounds 32 values into 16 lanes, in order
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 2 * j + kVec), _mm512_loadu_ps(x + 2 * j));
    _mm512_storeu_si512(dst + j, reinterpret_cast<__m512i>(v));
  }
#endif
#pragma omp simd
  for (int64_t i = j; i < n / 2; ++i)
    dst[i] = bf16_operand_bits(x[2 * i]) | bf16_operand_bits(x[2 * i + 1]) << 16;
}

// dst[j] = the bf16 lane (lo[j], hi[j]) for j < n: two rows in lanes across them; a null hi counts as zeros.
inline void bf16_lanes_across(uint32_t* dst, const float* lo, const float* hi, int64_t n) {
  int64_t j = 0;
#ifdef __AVX512BF16__
  // The conversion puts lo's 16 values before hi's; the permutation interleaves them.
  alignas(64) static constexpr uint16_t kInterleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i order = _mm512_load_si512(kInterleave);
  for (; j + kVec <= n; j += kVec) {
    const __m512 h = hi ? _mm512_loadu_ps(hi + j) : _mm512_setzero_ps();
    const __m512bh v = _mm512_cvtne2ps_pbh(h, _mm512_loadu_ps(lo + j));
    _mm512_storeu_si512(dst + j, _mm512_permutexvar_epi16(order, reinterpret_cast<__m512i>(v)));
  }
#endif
#pragma omp simd
  for (int64_t i = j; i < n; ++i)
    dst[i] = bf16_operand_bits(lo[i]) | (hi ? bf16_operand_bits(hi[i]) << 16 : 0u);
}

// dst[c][r] = src[r][c] for r < rows, c < cols: 4-byte elements (lanes or floats), row strides in elements.
template <typename X>
void transpose(X* dst, int64_t ld_dst, const X* src, int64_t ld_src, int64_t rows, int64_t cols) {
  static_assert(sizeof(X) == 4);
  int64_t r0 = 0;
#ifdef __AVX512F__
  const int64_t c0 = cols / 16 * 16;
  for (; r0 + 16 <= rows; r0 += 16) {
    for (int64_t c = 0; c < c0; c += 16)
      tiles::transpose16x16(dst + c * ld_dst + r0, ld_dst, src + r0 * ld_src + c, ld_src);
  }
  // The edges, below: rows past the last whole block, and columns past the last whole block in the rows
  // above.
  for (int64_t r = 0; r < r0; ++r) {
    for (int64_t c = c0; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld_src + c];
  }
#endif
  for (int64_t r = r0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld_src + c];
  }
}

}  // namespace mt::kernels::MT_ISA
