// The dynamic maps' construction (definition in dynamic_map.h). Built once, with the baseline flags: the
// tables are data, the same for every ISA level.
#include "backend/cpu/dynamic_map.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace mt::kernels {

namespace {

// 10^(6-i) for decade i: exact in fp64, so each value is one fp64 division away from its definition.
constexpr double kDecadeDivisor[7] = {1e6, 1e5, 1e4, 1e3, 1e2, 1e1, 1e0};

// Bucket b of either sign holds the magnitudes [low, high) (the lowest from 0, the top one beyond 1).
float bucket_bound(int b) {
  return std::bit_cast<float>((kFirstBucketKey + static_cast<uint32_t>(b)) << (23 - kBucketMantissaBits));
}

// The bucket of x in [low, high) (positive) or (-high, -low] (negative): the thresholds below it, and the
// low bits of the one inside it, if any. x reaches t exactly when t <= x, so for the negative side "below"
// includes -high.
void fill_bucket(DynamicMap& map, int index, double low, double high, bool negative) {
  const auto& t = map.threshold;
  const auto below = [&](float th) { return negative ? th <= -high : th < low; };
  const auto inside = [&](float th) {
    return negative ? (th > -high && th <= -low) : (th >= low && th < high);
  };
  if (std::count_if(t.begin(), t.end(), inside) > 1) throw std::logic_error("dynamic map: bucket too wide");
  int32_t reach = 0x10000;  // no threshold
  for (float th : t) {
    const int32_t low_bits = static_cast<int32_t>(std::bit_cast<uint32_t>(th) & 0xffffu);
    if (inside(th)) reach = negative ? 0xffff - low_bits : low_bits;
  }
  map.bucket[index] = static_cast<int32_t>(std::count_if(t.begin(), t.end(), below)) << 17 | reach;
}

void fill_buckets(DynamicMap& map) {
  for (int b = 0; b < kBucketsPerSign; ++b) {
    const double low = b == 0 ? 0.0 : bucket_bound(b);
    const double high =
        b == kBucketsPerSign - 1 ? std::numeric_limits<double>::infinity() : bucket_bound(b + 1);
    fill_bucket(map, b, low, high, false);
    fill_bucket(map, kBucketsPerSign + b, low, high, true);
  }
}

// The vector quantizer's tables (dynamic_map.h: DynamicMapSearch), from the map's decade layout.
void fill_search(DynamicMap& map, bool is_signed) {
  DynamicMapSearch& s = map.search;
  s.slope.fill(0.0f);
  s.offset.fill(0.5f);  // outside the decades p = 0.5: never near a whole number
  s.code.fill(0);
  // boundary[k]: the threshold where state k + 1 begins (positive side), the one below magnitude code base.
  std::array<float, kSearchStates - 1> boundary{};
  int base = 1;
  for (int d = 0; d < 7; ++d) {
    const int fractions = is_signed ? 1 << d : 1 << (d + 1);
    const double first = (0.1 + 0.9 / (2.0 * fractions)) / kDecadeDivisor[d];
    if (map.value[map.zero_code + base] != static_cast<float>(first))
      throw std::logic_error("dynamic map: decade layout");
    boundary[d] = map.threshold[map.zero_code + base - 1];
    s.slope[d + 1] = static_cast<float>(fractions * kDecadeDivisor[d] / 0.9);
    s.offset[d + 1] = static_cast<float>(-fractions / 9.0);
    s.code[d + 1] = base | (fractions - 1) << 16;
    base += fractions;
  }
  if (map.zero_code + base != 255) throw std::logic_error("dynamic map: decade layout");
  boundary[7] = map.threshold[254];
  s.code[8] = base;
  for (int i = 0; i < 32; ++i) {
    const float bottom = std::bit_cast<float>(static_cast<uint32_t>(kSearchFirstBinade + i) << 23);
    const int state = static_cast<int>(
        std::count_if(boundary.begin(), boundary.end(), [&](float b) { return b <= bottom; }));
    int32_t inside = 1 << 24;
    for (float b : boundary) {
      if (b > bottom && b < 2 * bottom && i < 31) {
        if (inside != 1 << 24) throw std::logic_error("dynamic map: two state boundaries in a binade");
        inside = static_cast<int32_t>(std::bit_cast<uint32_t>(b) & 0x7fffffu);
        // An approximate quotient this close to a binade's edge could be in the wrong binade.
        if (inside <= 2 * kSearchUlps || inside >= (1 << 23) - 2 * kSearchUlps)
          throw std::logic_error("dynamic map: state boundary at a binade's edge");
      }
    }
    s.binade[i] = state << 25 | inside;
  }
  for (int c = 0; c < 256; ++c) {
    const uint32_t bits = std::bit_cast<uint32_t>(map.value[c]);
    s.value_low[c] = static_cast<uint16_t>(bits & 0xffffu);
    s.value_high[c] = static_cast<uint16_t>(bits >> 16);
  }
}

DynamicMap build_map(bool is_signed) {
  std::vector<double> values = {0.0, 1.0};
  for (int i = 0; i < 7; ++i) {
    const int fractions = is_signed ? 1 << i : 1 << (i + 1);
    for (int j = 0; j < fractions; ++j) {
      const double magnitude = (0.1 + 0.9 * (2 * j + 1) / (2.0 * fractions)) / kDecadeDivisor[i];
      values.push_back(magnitude);
      if (is_signed) values.push_back(-magnitude);
    }
  }
  if (values.size() != 256) throw std::logic_error("dynamic map: not 256 values");
  DynamicMap map{};
  for (size_t c = 0; c < 256; ++c) map.value[c] = static_cast<float>(values[c]);
  std::sort(map.value.begin(), map.value.end());
  for (size_t k = 0; k < 255; ++k) {
    const double low = map.value[k], high = map.value[k + 1];
    // Two fp32 values within 2^29 of each other's scale: their sum, and so the midpoint, is exact in fp64.
    const double midpoint = (low + high) / 2;
    if (midpoint * 2 - low != high || !(low < high)) throw std::logic_error("dynamic map: inexact midpoint");
    float threshold = static_cast<float>(midpoint);
    if (static_cast<double>(threshold) <= midpoint) threshold = std::nextafter(threshold, 2.0f);
    map.threshold[k] = threshold;
  }
  map.zero_code =
      static_cast<uint8_t>(std::find(map.value.begin(), map.value.end(), 0.0f) - map.value.begin());
  fill_buckets(map);
  fill_search(map, is_signed);
  return map;
}

}  // namespace

const DynamicMap& signed_dynamic_map() {
  static const DynamicMap map = build_map(true);
  return map;
}

const DynamicMap& unsigned_dynamic_map() {
  static const DynamicMap map = build_map(false);
  return map;
}

}  // namespace mt::kernels
