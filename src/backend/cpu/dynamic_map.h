// The dynamic (tree) quantization map of Dettmers et al., "8-bit Optimizers via Block-wise Quantization"
// (ICLR 2022), as its int8 Adam states use it: 256 values in [-1, 1] (signed, for the first moment) or
// [0, 1] (unsigned, for the second), dense near zero and coarse near one, so that one scale per block covers
// moments of very different sizes. Built once, in fp64, and rounded to fp32; the same everywhere.
//
// Definition. The values are 0, 1, and for each decade i = 0..6 the midpoints of F_i equal steps of
// [0.1, 1] scaled by 10^(i-6):
//     (0.1 + 0.9 * (2j + 1) / (2 F_i)) / 10^(6-i),   j = 0..F_i-1,
// with F_i = 2^i for the signed map (each value also negated: 127 + 127 + 0 + 1 = 256 values) and
// F_i = 2^(i+1) for the unsigned one, which spends the sign bit on resolution (254 + 0 + 1). This is the
// paper's exponent-of-zeros, indicator bit, linear fraction layout, and bitsandbytes' create_dynamic_map
// (which computes the same midpoints in fp32, so its values may differ from these in the last bits).
// A code is the value's index in ascending order.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace mt::kernels {

// nearest_code finds a code in one lookup: x's fp32 bits pick a bucket (sign, exponent and the top 7
// mantissa bits: 1/128 of a binade), which holds at most one threshold (the map's steps are wider than the
// buckets; build checks it), so the code is the bucket's count of thresholds below it, plus one if x reaches
// its threshold. Inside a bucket x and its threshold share their top 16 bits, so comparing the low 16 decides
// (mirrored for negative x, whose bits order opposite to their values), and one 32-bit entry holds the count
// and the threshold's low bits. Magnitudes below 2^-25 (under every non-zero threshold) share the lowest
// bucket, and above 1 the top one; neither holds a threshold.
constexpr int kBucketMantissaBits = 7;
constexpr uint32_t kFirstBucketKey = (127 - 25) << kBucketMantissaBits;  // 2^-25: fp32 bits >> 16
constexpr int kBucketsPerSign = (25 << kBucketMantissaBits) + 1;         // up to 1.0's bucket

// The vector quantizer of block_codec.h (AVX-512) computes a code instead of looking it up: a magnitude u in
// [0, 1] is in one of 9 states (0: below the first threshold, so code of 0; 1..7: decade 0..6; 8: at or above
// the last threshold, so 1.0), found from u's binade (each holds at most one state boundary, a threshold of
// the map), and inside decade d the position p = u * slope + offset = (u * 10^(6-d) - 0.1) * F_d / 0.9
// counts the equal steps of [0.1, 1] below u: the in-decade thresholds are the midpoints at the whole p.
// The quantizer flags an element whose p is within kSearchPositionMargin of a whole number, or whose u is
// within kSearchUlps of a state boundary, and codes those the exact way (nearest_code), so the tables need
// not reproduce the map's rounding, only come within those margins of it (block_codec.h says how this was
// checked).
constexpr int kSearchFirstBinade = 96;  // fp32 exponent field of binade 0: 2^-31, below every threshold
constexpr int kSearchStates = 9;
constexpr int kSearchUlps = 4;  // how far apart an approximate quotient and the exact one may be
constexpr float kSearchPositionMargin = 0x1p-11f;
struct DynamicMapSearch {
  // Per binade 2^(i - 31) (i = 0..31; smaller magnitudes fall in 0, larger in 31): the state at its bottom
  // << 25 | the mantissa bits of the boundary inside it, or 1 << 24 when it holds none.
  alignas(64) std::array<int32_t, 32> binade;
  // Per state (16 entries, 9 used): p's slope and offset (0 and 0.5 outside the decades), and the
  // magnitude code of the state's first value | (its number of values - 1) << 16. A magnitude code is the
  // value's rank among the map's values >= 0: code - zero_code on the positive side.
  alignas(64) std::array<float, 16> slope, offset;
  alignas(64) std::array<int32_t, 16> code;
  // The values' fp32 bits in halves, value[c] = high[c] << 16 | low[c], for the vector dequantizer's
  // 16-bit table lookups.
  alignas(64) std::array<uint16_t, 256> value_low, value_high;
};

struct DynamicMap {
  std::array<float, 256> value;  // ascending: code c means value[c]
  // threshold[k] is the smallest fp32 above the exact midpoint of value[k] and value[k+1]: x >= threshold[k]
  // is x's being nearer to value[k+1], with a tie (x exactly on the midpoint) going to the smaller value.
  std::array<float, 255> threshold;
  uint8_t zero_code;  // the code of 0.0
  // Per bucket, positive magnitudes first, then negative ones: (thresholds below the bucket) << 17 | reach:
  // x passes the bucket's threshold when its low 16 bits (mirrored when negative) are >= reach; 0x10000 for
  // a bucket without one.
  std::array<int32_t, 2 * kBucketsPerSign> bucket;
  DynamicMapSearch search;
};

const DynamicMap& signed_dynamic_map();
const DynamicMap& unsigned_dynamic_map();

// The code of the value nearest to x, ties to the smaller value: the number of thresholds <= x. Below the
// map's range it gives code 0, above it 255; a NaN gives 255 or 0 by its sign bit (quantize_block never
// passes one). Branch-free, so that a loop over elements vectorizes.
inline uint8_t nearest_code(const DynamicMap& map, float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const int magnitude = static_cast<int>((bits & 0x7fffffffu) >> (23 - kBucketMantissaBits)) -
                        static_cast<int>(kFirstBucketKey);
  const int entry =
      map.bucket[std::clamp(magnitude, 0, kBucketsPerSign - 1) + (bits >> 31 ? kBucketsPerSign : 0)];
  // 0xffff - low bits for a negative x, as an xor: a select here keeps GCC from vectorizing the loop.
  const int low = static_cast<int>(bits & 0xffffu) ^ (-static_cast<int>(bits >> 31) & 0xffff);
  return static_cast<uint8_t>((entry >> 17) + (low >= (entry & 0x1ffff) ? 1 : 0));
}

}  // namespace mt::kernels
