#include "core/rng.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mt {
namespace {

TEST(Rng, SameCounterSameDraw) {
  EXPECT_EQ(random_bits(7, 1, 123), random_bits(7, 1, 123));
  EXPECT_NE(random_bits(7, 1, 123), random_bits(7, 1, 124));
  EXPECT_NE(random_bits(7, 1, 123), random_bits(7, 2, 123));
  EXPECT_NE(random_bits(7, 1, 123), random_bits(8, 1, 123));
}

TEST(Rng, NormalHasUnitMoments) {
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double x = random_normal(42, 3, i);
    sum += x;
    sum_sq += x * x;
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  // Standard error of the mean is 1/sqrt(n) ~ 0.0022; of the variance ~ sqrt(2/n) ~ 0.0032.
  EXPECT_NEAR(mean, 0.0, 0.012);
  EXPECT_NEAR(var, 1.0, 0.016);
}

TEST(Rng, UniformIsInsideOpenInterval) {
  for (int i = 0; i < 10000; ++i) {
    const double u = random_uniform(1, 0, i);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace mt
