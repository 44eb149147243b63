// The 8-bit moment formats: the dynamic maps' shape, nearest codes with their tie rule, e4m3 rounding, and
// block-wise quantizing (tail blocks, zero and NaN blocks, error bounds, thread counts). The numpy reference
// of the same definitions is tests/quant/test_moment_quant.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/block_quant.h"
#include "backend/cpu/dynamic_map.h"
#include "core/fp8.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::random_floats;
using testing::with_threads;

// The code whose value is nearest to x in exact arithmetic, ties to the smaller value, by trying all 256.
uint8_t brute_force_nearest(const DynamicMap& map, float x) {
  int best = 0;
  for (int c = 1; c < 256; ++c) {
    const double d = std::abs(double(x) - map.value[c]), best_d = std::abs(double(x) - map.value[best]);
    if (d < best_d) best = c;  // equal distance keeps the smaller value
  }
  return static_cast<uint8_t>(best);
}

// Values spread over the map's whole range: uniform in [-1, 1] and log-uniform magnitudes down to 1e-8.
std::vector<float> map_probe_values(int64_t n, uint64_t stream) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    const double u = random_uniform(7, stream, i), sign = i % 2 ? 1.0 : -1.0;
    x[i] = static_cast<float>(i % 3 ? sign * u : sign * std::pow(10.0, -8 * u));
  }
  return x;
}

TEST(KernelMomentQuant, DynamicMapsHaveThePapersShape) {
  const DynamicMap& s = signed_dynamic_map();
  const DynamicMap& u = unsigned_dynamic_map();
  for (const DynamicMap* map : {&s, &u}) {
    EXPECT_TRUE(std::is_sorted(map->value.begin(), map->value.end()));
    EXPECT_EQ(std::adjacent_find(map->value.begin(), map->value.end()), map->value.end());  // distinct
    EXPECT_EQ(map->value[map->zero_code], 0.0f);
    EXPECT_EQ(map->value[255], 1.0f);
    for (int k = 0; k < 255; ++k) {
      ASSERT_GT(map->threshold[k], map->value[k]);
      ASSERT_LE(map->threshold[k], map->value[k + 1]);
    }
  }
  EXPECT_EQ(s.zero_code, 127);  // 127 negative values, 0, 127 positive ones and 1
  EXPECT_EQ(u.zero_code, 0);
  // Decade 6's first midpoints: 0.1 + 0.9 / 128 (signed, 64 steps) and 0.1 + 0.9 / 256 (unsigned, 128).
  EXPECT_EQ(s.value[128 + 63], static_cast<float>(0.1 + 0.9 / 128));
  EXPECT_EQ(u.value[127], static_cast<float>(0.1 + 0.9 / 256));
  EXPECT_EQ(s.value[0], -s.value[254]);  // -1 is not a value: the most negative is -(0.1 + 0.9 * 127/128)
  EXPECT_EQ(s.value[0], static_cast<float>(-(0.1 + 0.9 * 127 / 128)));
  EXPECT_EQ(s.value[128], static_cast<float>(0.55e-6));  // the smallest magnitude: decade 0's one midpoint
  EXPECT_EQ(u.value[1], static_cast<float>(0.325e-6));
}

TEST(KernelMomentQuant, NearestCodeIsNearestWithTiesToTheSmallerValue) {
  for (const DynamicMap* map : {&signed_dynamic_map(), &unsigned_dynamic_map()}) {
    for (float x : map_probe_values(20000, 1))
      ASSERT_EQ(nearest_code(*map, x), brute_force_nearest(*map, x)) << x;
    for (int k = 0; k < 255; ++k) {
      // Every value codes to itself; a midpoint that is an fp32 value goes down, the next fp32 up.
      ASSERT_EQ(nearest_code(*map, map->value[k]), k);
      const double midpoint = (double(map->value[k]) + map->value[k + 1]) / 2;
      if (static_cast<double>(static_cast<float>(midpoint)) == midpoint) {
        ASSERT_EQ(nearest_code(*map, static_cast<float>(midpoint)), k);
      }
      ASSERT_EQ(nearest_code(*map, map->threshold[k]), k + 1);
      ASSERT_EQ(nearest_code(*map, std::nextafter(map->threshold[k], -2.0f)), k);
    }
    // Both sides of every bucket boundary (nearest_code's lookup), and of the clamped ends.
    for (int b = 0; b <= kBucketsPerSign; ++b) {
      const float edge = std::bit_cast<float>((kFirstBucketKey + b) << (23 - kBucketMantissaBits));
      for (float x : {edge, std::nextafter(edge, 0.0f), -edge, -std::nextafter(edge, 0.0f)})
        ASSERT_EQ(nearest_code(*map, x), brute_force_nearest(*map, x)) << x;
    }
    EXPECT_EQ(nearest_code(*map, 1.0f), 255);
    EXPECT_EQ(nearest_code(*map, 2.0f), 255);
  }
  EXPECT_EQ(nearest_code(signed_dynamic_map(), -1.0f), 0);
  EXPECT_EQ(nearest_code(signed_dynamic_map(), -0.0f), 127);
  EXPECT_EQ(nearest_code(unsigned_dynamic_map(), -0.5f), 0);
}

// The e4m3 value nearest to x, ties to the even byte (the one with mantissa bit 0), saturating: by trying
// all.
uint8_t brute_force_e4m3(float x) {
  if (std::isnan(x)) return kE4m3Nan;
  const double a = std::min(std::abs(double(x)), double(kE4m3Max));
  int best = 0;
  for (int b = 1; b < 0x7f; ++b) {
    const double d = std::abs(a - to_f32(fp8_e4m3{uint8_t(b)})),
                 best_d = std::abs(a - to_f32(fp8_e4m3{uint8_t(best)}));
    if (d < best_d || (d == best_d && b % 2 == 0)) best = b;
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(KernelMomentQuant, E4m3RoundsToNearestEvenAndSaturates) {
  for (int b = 0; b < 256; ++b) {
    const float f = to_f32(fp8_e4m3{uint8_t(b)});
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f));
    } else {
      ASSERT_EQ(round_to_e4m3(f).bits, b) << f;  // every value is its own code
    }
  }
  EXPECT_EQ(to_f32(fp8_e4m3{0x7e}), 448.0f);
  EXPECT_EQ(to_f32(fp8_e4m3{0x01}), 0x1p-9f);
  EXPECT_EQ(to_f32(fp8_e4m3{0x08}), 0x1p-6f);
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {449.0f, 464.0f, 1e30f, inf}) {
    EXPECT_EQ(round_to_e4m3(x).bits, 0x7e) << x;
    EXPECT_EQ(round_to_e4m3(-x).bits, 0xfe) << x;
  }
  EXPECT_EQ(round_to_e4m3(std::numeric_limits<float>::quiet_NaN()).bits, kE4m3Nan);
  EXPECT_EQ(round_to_e4m3(-std::numeric_limits<float>::quiet_NaN()).bits, kE4m3Nan);
  EXPECT_EQ(round_to_e4m3(-0.0f).bits, 0x80);
  EXPECT_EQ(round_to_e4m3(0x1p-10f).bits, 0x00);      // halfway to the smallest subnormal: even, 0
  EXPECT_EQ(round_to_e4m3(3 * 0x1p-10f).bits, 0x02);  // halfway between 1 and 2 steps: 2
  EXPECT_EQ(round_to_e4m3(1.0625f).bits, 0x38);       // halfway between 1 and 1.125: 1
  EXPECT_EQ(round_to_e4m3(1.1875f).bits, 0x3a);       // halfway between 1.125 and 1.25: 1.25
  std::vector<float> x = random_floats(20000, 2, 30.0);
  for (int64_t i = 0; i < 20000; ++i)
    x.push_back(static_cast<float>(std::ldexp(random_uniform(3, 1, i), -int(i % 14))));
  for (float f : x) ASSERT_EQ(round_to_e4m3(f).bits, brute_force_e4m3(f)) << f;
}

struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales, back;
};
Quantized quantize(MomentCodec c, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  Quantized q{std::vector<uint8_t>(n), std::vector<float>(moment_block_count(c, n)), std::vector<float>(n)};
  quantize_blocks(c, x.data(), n, q.codes.data(), q.scales.data());
  dequantize_blocks(c, q.codes.data(), q.scales.data(), n, q.back.data());
  return q;
}

constexpr MomentCodec kCodecs[] = {MomentCodec::dynamic_signed, MomentCodec::dynamic_unsigned,
                                   MomentCodec::e4m3};

// Second moments are non-negative; the others get signed values.
std::vector<float> moment_values(MomentCodec c, int64_t n, uint64_t stream) {
  std::vector<float> x = random_floats(n, stream, 1e-3);
  if (c == MomentCodec::dynamic_unsigned)
    for (float& f : x) f = f * f;
  return x;
}

TEST(KernelMomentQuant, BlocksStoreAbsmaxAndNearestCodes) {
  for (MomentCodec c : kCodecs) {
    const int64_t block = moment_block_size(c), n = 3 * block + 77;  // a short tail block
    std::vector<float> x = moment_values(c, n, 3);
    x[5] *= 1000;  // an outlier: only its own block's scale sees it
    const Quantized q = quantize(c, x);
    ASSERT_EQ(q.scales.size(), 4u);
    for (int64_t b = 0; b < 4; ++b) {
      const int64_t first = b * block, last = std::min(n, first + block);
      float absmax = 0;
      for (int64_t i = first; i < last; ++i) absmax = std::max(absmax, std::abs(x[i]));
      const float scale = c == MomentCodec::e4m3 ? absmax / 448.0f : absmax;
      ASSERT_EQ(q.scales[b], scale) << b;
      for (int64_t i = first; i < last; ++i) {
        uint8_t expected = c == MomentCodec::e4m3 ? round_to_e4m3(x[i] / scale).bits
                                                  : brute_force_nearest(c == MomentCodec::dynamic_signed
                                                                            ? signed_dynamic_map()
                                                                            : unsigned_dynamic_map(),
                                                                        x[i] / scale);
        // A positive second moment keeps the smallest positive code.
        if (c == MomentCodec::dynamic_unsigned && expected == 0 && x[i] / scale > 0) expected = 1;
        ASSERT_EQ(q.codes[i], expected) << i;
      }
    }
  }
}

// An element's byte by the definition (block_quant.h): its quotient by the block's scale, coded.
uint8_t defined_code(MomentCodec c, float x, float scale) {
  const float v = x / scale;
  if (c == MomentCodec::e4m3) return round_to_e4m3(v).bits;
  const uint8_t code =
      nearest_code(c == MomentCodec::dynamic_signed ? signed_dynamic_map() : unsigned_dynamic_map(), v);
  return c == MomentCodec::dynamic_unsigned && code == 0 && v > 0 ? 1 : code;
}

// Blocks of the given contents, each padded with zeros to a whole block.
std::vector<float> whole_blocks(MomentCodec c, const std::vector<std::vector<float>>& blocks) {
  const size_t block = static_cast<size_t>(moment_block_size(c));
  std::vector<float> x;
  for (const auto& b : blocks) {
    for (size_t at = 0; at < b.size(); at += block) {
      x.insert(x.end(), b.begin() + at, b.begin() + std::min(b.size(), at + block));
      x.resize((x.size() + block - 1) / block * block, 0.0f);
    }
  }
  return x;
}

// The quotients where a code changes, for a block whose scale is 1 (int8: absmax 1; e4m3: absmax 448):
// the map's thresholds, e4m3's midpoints.
std::vector<float> code_edges(MomentCodec c) {
  std::vector<float> edges;
  if (c == MomentCodec::e4m3) {
    for (int b = 0; b < 0x7e; ++b)
      edges.push_back(
          static_cast<float>((double(to_f32(fp8_e4m3{uint8_t(b)})) + to_f32(fp8_e4m3{uint8_t(b + 1)})) / 2));
  } else {
    const DynamicMap& map = c == MomentCodec::dynamic_signed ? signed_dynamic_map() : unsigned_dynamic_map();
    edges.assign(map.threshold.begin(), map.threshold.end());
  }
  return edges;
}

// Whatever a level computes a byte with (the AVX-512 build: a reciprocal and the map's decade layout, with
// the elements near a code's edge redone by division; block_codec.h), the bytes are the definition's: 32
// fp32 steps either side of every edge, both signs, at scale 1 and at scales from 2^-120 to 2^120; a sweep
// of the quotients in [0, 1] (int8) or [0, 448]; tiny elements beside large ones (quotients that underflow).
TEST(KernelMomentQuant, BytesAreTheDefinitionsNearEveryEdgeAndAtAnyScale) {
  for (MomentCodec c : kCodecs) {
    const float top = c == MomentCodec::e4m3 ? kE4m3Max : 1.0f;  // the absmax that makes the scale 1
    std::vector<std::vector<float>> blocks;
    std::vector<float> near_edges = {top};
    for (float edge : code_edges(c)) {
      float below = edge, above = edge;
      for (int k = 0; k < 32; ++k) {
        below = std::nextafter(below, 0.0f);
        above = std::nextafter(above, 2 * top);
        near_edges.insert(near_edges.end(), {below, above, -below, -above});
      }
      near_edges.insert(near_edges.end(), {edge, -edge});
    }
    blocks.push_back(near_edges);
    std::vector<float> sweep = {top};
    for (uint32_t bits = 0; bits <= std::bit_cast<uint32_t>(top); bits += 4099)
      sweep.insert(sweep.end(), {std::bit_cast<float>(bits), -std::bit_cast<float>(bits)});
    blocks.push_back(sweep);
    // Scaled: each block's first element sets the scale; the others are edges times it, so their quotients
    // land within an ulp or so of the edges.
    const int64_t block = moment_block_size(c);
    const std::vector<float> edges = code_edges(c);
    for (int e = -120; e <= 120; e += 7) {
      const float absmax = std::ldexp(static_cast<float>(1 + random_uniform(8, 1, e + 200)), e);
      std::vector<float> scaled = {absmax};
      const float scale = c == MomentCodec::e4m3 ? absmax / kE4m3Max : absmax;
      for (int64_t i = 1; i < block; ++i) {
        const float edge = edges[(i * 37 + e + 120) % edges.size()];
        scaled.push_back((i % 2 ? 1 : -1) * std::nextafter(edge * scale, i % 3 ? 0.0f : 2 * absmax));
      }
      blocks.push_back(scaled);
    }
    blocks.push_back({1e30f, 1e-20f, 1e-30f, 0x1p-149f, 3e-15f, -1e-20f, 0.0f, -0.0f, 1e25f});
    blocks.push_back({1.0f, 0x1p-149f, 0x1p-126f, 1e-40f, 0x1p-100f, 0x1p-101f, 0x1p-99f});
    const std::vector<float> x = whole_blocks(c, blocks);
    const Quantized q = quantize(c, x);
    for (size_t i = 0; i < x.size(); ++i) {
      const float scale = q.scales[i / block];
      ASSERT_EQ(q.codes[i], scale > 0 ? defined_code(c, x[i], scale) : zero_code(c))
          << "codec " << int(c) << " at " << i << ": " << x[i] << " / " << scale;
    }
  }
}

TEST(KernelMomentQuant, RoundTripErrorIsWithinHalfAStep) {
  for (MomentCodec c : kCodecs) {
    const std::vector<float> x = moment_values(c, 5 * moment_block_size(c) + 3, 4);
    const Quantized q = quantize(c, x);
    const int64_t block = moment_block_size(c);
    for (size_t i = 0; i < x.size(); ++i) {
      const float scale = q.scales[i / block];
      double bound;
      if (c == MomentCodec::e4m3) {
        bound = std::max(std::abs(double(x[i])) / 16, 0x1p-10 * scale) *
                1.0001;  // 3 mantissa bits, or a subnormal step
      } else {
        // Half the widest gap of the map, near 1: 0.9/64/2 (signed) or 0.9/128/2, and the signed map's -1
        // gap; plus the fp32 roundings of x / absmax and code * absmax, relative to x.
        bound = scale * ((c == MomentCodec::dynamic_signed ? 0.9 / 128 : 0.9 / 256) + 0x1p-22);
      }
      ASSERT_LE(std::abs(double(q.back[i]) - x[i]), bound) << i;
    }
  }
}

TEST(KernelMomentQuant, ZeroTinyAndNanBlocks) {
  for (MomentCodec c : kCodecs) {
    const int64_t block = moment_block_size(c), n = 3 * block;
    std::vector<float> x = moment_values(c, n, 5);
    std::fill(x.begin(), x.begin() + block, 0.0f);               // block 0: zeros
    x[2 * block + 1] = std::numeric_limits<float>::quiet_NaN();  // block 2: a NaN
    const Quantized q = quantize(c, x);
    EXPECT_EQ(q.scales[0], 0.0f);
    for (int64_t i = 0; i < block; ++i) {
      ASSERT_EQ(q.codes[i], zero_code(c));
      ASSERT_EQ(q.back[i], 0.0f);
    }
    for (int64_t i = block; i < 2 * block; ++i) ASSERT_TRUE(std::isfinite(q.back[i]));
    EXPECT_TRUE(std::isnan(q.scales[2]));
    for (int64_t i = 2 * block; i < n; ++i) ASSERT_TRUE(std::isnan(q.back[i])) << "NaN poisons its block";
  }
  // An fp8 scale that underflows to 0 stores zeros rather than dividing by it.
  const std::vector<float> tiny(kFp8MomentBlock, 1e-44f);
  const Quantized q = quantize(MomentCodec::e4m3, tiny);
  EXPECT_EQ(q.scales[0], 0.0f);
  for (float f : q.back) ASSERT_EQ(f, 0.0f);
}

TEST(KernelMomentQuant, FreshStateReadsAsZeros) {
  for (MomentCodec c : kCodecs) {
    const int64_t n = moment_block_size(c) + 5;
    const std::vector<uint8_t> codes(n, zero_code(c));
    const std::vector<float> scales(moment_block_count(c, n), 0.0f);
    std::vector<float> back(n, 1.0f);
    dequantize_blocks(c, codes.data(), scales.data(), n, back.data());
    for (float f : back) ASSERT_EQ(std::bit_cast<uint32_t>(f), 0u);
  }
}

TEST(KernelMomentQuant, SameBitsForAnyThreadCountAndNothingWrittenPastTheEnd) {
  for (MomentCodec c : kCodecs) {
    const int64_t n = 7 * moment_block_size(c) + 100;
    const std::vector<float> x = moment_values(c, n, 6);
    std::vector<std::vector<uint8_t>> codes;
    for (int threads : {1, 2, 3}) {
      std::vector<uint8_t> out(n + 16, 0xa5);
      std::vector<float> scales(moment_block_count(c, n));
      with_threads(threads, [&] { quantize_blocks(c, x.data(), n, out.data(), scales.data()); });
      for (int64_t i = n; i < n + 16; ++i) ASSERT_EQ(out[i], 0xa5);
      out.insert(out.end(), reinterpret_cast<uint8_t*>(scales.data()),
                 reinterpret_cast<uint8_t*>(scales.data() + scales.size()));
      codes.push_back(std::move(out));
    }
    EXPECT_EQ(codes[0], codes[1]);
    EXPECT_EQ(codes[0], codes[2]);
  }
}

}  // namespace
}  // namespace mt::kernels
