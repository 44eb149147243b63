#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/half.h"
#include "core/rng.h"

namespace mt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

uint16_t bf16_bits(float x) {
  return round_to<bf16>(x).bits;
}
uint16_t f16_bits(float x) {
  return round_to<f16>(x).bits;
}

TEST(HalfBf16, RoundsToNearestWithTiesToEven) {
  // bf16 keeps 7 mantissa bits: neighbours of 1 are 1 - 2^-8 and 1 + 2^-7.
  EXPECT_EQ(to_f32(round_to<bf16>(1.0f + 0x1p-8f)), 1.0f);                // tie, 1 is even
  EXPECT_EQ(to_f32(round_to<bf16>(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);  // tie, upper neighbour is even
  EXPECT_EQ(to_f32(round_to<bf16>(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);  // just past the tie
  EXPECT_EQ(to_f32(round_to<bf16>(1.0f + 0x1p-8f - 0x1p-20f)), 1.0f);            // just before it
  EXPECT_EQ(to_f32(round_to<bf16>(-(1.0f + 3 * 0x1p-8f))), -(1.0f + 0x1p-6f));
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
}

TEST(HalfBf16, NanStaysNan) {
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    // 0x7f800001 would truncate to the infinity pattern without the quieting bit.
    EXPECT_TRUE(std::isnan(to_f32(round_to<bf16>(std::bit_cast<float>(nan))))) << std::hex << nan;
  }
}

TEST(HalfBf16, OverflowBecomesInfinity) {
  EXPECT_EQ(to_f32(round_to<bf16>(std::numeric_limits<float>::max())), kInf);
  EXPECT_EQ(to_f32(round_to<bf16>(-std::numeric_limits<float>::max())), -kInf);
  EXPECT_EQ(to_f32(round_to<bf16>(kInf)), kInf);
  // The largest finite bf16 survives; halfway above it (an odd mantissa) goes to the even neighbour, inf.
  const float max_bf16 = std::bit_cast<float>(0x7f7f0000u);
  EXPECT_EQ(to_f32(round_to<bf16>(max_bf16)), max_bf16);
  EXPECT_EQ(to_f32(round_to<bf16>(std::bit_cast<float>(0x7f7f8000u))), kInf);
}

TEST(HalfBf16, EveryValueRoundTripsExactly) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const bf16 x{static_cast<uint16_t>(bits)};
    if (std::isnan(to_f32(x))) continue;
    ASSERT_EQ(round_to<bf16>(to_f32(x)).bits, bits) << std::hex << bits;
  }
}

TEST(HalfF16, RoundsToNearestWithTiesToEven) {
  // f16 keeps 10 mantissa bits.
  EXPECT_EQ(to_f32(round_to<f16>(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(to_f32(round_to<f16>(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  EXPECT_EQ(to_f32(round_to<f16>(1.0f + 0x1p-11f + 0x1p-20f)), 1.0f + 0x1p-10f);
  EXPECT_EQ(to_f32(round_to<f16>(-(1.0f + 3 * 0x1p-11f))), -(1.0f + 0x1p-9f));
}

TEST(HalfF16, Subnormals) {
  EXPECT_EQ(to_f32(f16{0x0001}), 0x1p-24f);  // the smallest subnormal
  EXPECT_EQ(to_f32(f16{0x03ff}), 0x1p-14f - 0x1p-24f);
  EXPECT_EQ(f16_bits(0x1p-25f), 0x0000);      // tie between 0 and 2^-24: 0 is even
  EXPECT_EQ(f16_bits(0x1.8p-25f), 0x0001);    // past the tie
  EXPECT_EQ(f16_bits(3 * 0x1p-25f), 0x0002);  // tie between 1 and 2 subnormal ulps: 2 is even
  EXPECT_EQ(f16_bits(-0x1p-24f), 0x8001);
  EXPECT_EQ(f16_bits(0x1p-26f), 0x0000);  // underflows to zero
}

TEST(HalfF16, OverflowBecomesInfinityFrom65520) {
  EXPECT_EQ(to_f32(round_to<f16>(65504.0f)), 65504.0f);  // the largest finite f16
  EXPECT_EQ(to_f32(round_to<f16>(65519.99f)), 65504.0f);
  EXPECT_EQ(to_f32(round_to<f16>(65520.0f)), kInf);  // the tie rounds to the even neighbour, 2^16 = inf
  EXPECT_EQ(to_f32(round_to<f16>(-65520.0f)), -kInf);
  EXPECT_EQ(to_f32(round_to<f16>(1e10f)), kInf);
}

TEST(HalfF16, NanStaysNan) {
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u}) {
    EXPECT_TRUE(std::isnan(to_f32(round_to<f16>(std::bit_cast<float>(nan))))) << std::hex << nan;
  }
}

TEST(HalfF16, EveryValueRoundTripsExactly) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const f16 x{static_cast<uint16_t>(bits)};
    if (std::isnan(to_f32(x))) continue;
    ASSERT_EQ(round_to<f16>(to_f32(x)).bits, bits) << std::hex << bits;
  }
}

TEST(HalfStochasticRound, IsUnbiasedAndReturnsOnlyTheNeighbours) {
  const int draws = 200000;
  int stream = 0;
  for (float lo : {1.0f, -3.5f, 0x1p-100f, 1232.0f}) {
    ASSERT_EQ(to_f32(round_to<bf16>(lo)), lo);
    const float hi = to_f32(bf16{static_cast<uint16_t>(bf16_bits(lo) + 1)});  // next away from zero
    for (double fraction : {0.01, 0.25, 0.5, 1.0 / 3, 0.9}) {
      const float x = static_cast<float>(lo + fraction * (hi - lo));
      ++stream;
      int ups = 0;
      for (int i = 0; i < draws; ++i) {
        const float r = to_f32(stochastic_round(x, static_cast<uint32_t>(random_bits(5, stream, i))));
        ASSERT_TRUE(r == lo || r == hi) << x << " became " << r;
        ups += r == hi;
      }
      // The mean is lo + p (hi - lo) with p = ups / draws; its standard error is sqrt(p (1 - p) / draws)
      // gaps.
      const double p = (x - static_cast<double>(lo)) / (static_cast<double>(hi) - lo);
      const double standard_error = std::sqrt(p * (1 - p) / draws);
      EXPECT_NEAR(static_cast<double>(ups) / draws, p, 5 * standard_error) << "x = " << x;
    }
  }
}

TEST(HalfStochasticRound, RepresentableValuesAndSpecialsAreKept) {
  for (uint32_t random : {0u, 1u, 0x7fffu, 0xffffu, 0xffffffffu}) {
    EXPECT_EQ(to_f32(stochastic_round(1.5f, random)), 1.5f);
    EXPECT_EQ(to_f32(stochastic_round(-0x1p-130f, random)), -0x1p-130f);  // bf16 subnormal
    EXPECT_EQ(to_f32(stochastic_round(kInf, random)), kInf);
    EXPECT_TRUE(std::isnan(to_f32(stochastic_round(std::bit_cast<float>(0x7f800001u), random))));
  }
}

}  // namespace
}  // namespace mt
