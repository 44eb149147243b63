// Rotary embeddings against the rotate_half formula in double, on a grouped-query qkv layout: q and k heads
// turn, v stays; the backward is the gradient of the forward (finite differences) and undoes it.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/rope.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::expect_close;
using testing::finite_difference;
using testing::random_floats;
using testing::to_double;
using testing::to_float;
using testing::to_storage;

constexpr int64_t B = 2, T = 9, NH = 4, NKV = 2, hs = 8;
constexpr float kTheta = 10000.0f;
const QkvLayout kLayout(NH* hs, NH, NKV);
const int64_t kSize = B * T * kLayout.row();

// rotate_half: y = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1], angle t * theta^(-2i/hs).
std::vector<double> rope_reference(const std::vector<double>& x) {
  std::vector<double> y = x;
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const double t = static_cast<double>(bt % T);
    for (int64_t h = 0; h < NH + NKV; ++h) {
      const double* r = &x[bt * kLayout.row() + h * hs];
      double* o = &y[bt * kLayout.row() + h * hs];
      for (int64_t i = 0; i < hs / 2; ++i) {
        const double a = t * std::pow(double(kTheta), -2.0 * double(i) / double(hs));
        o[i] = r[i] * std::cos(a) - r[i + hs / 2] * std::sin(a);
        o[i + hs / 2] = r[i + hs / 2] * std::cos(a) + r[i] * std::sin(a);
      }
    }
  }
  return y;
}

TEST(KernelRope, ForwardRotatesQueriesAndKeysOnly) {
  auto x = random_floats(kSize, 1);
  const auto expected = rope_reference(to_double(x));
  rope_forward(x.data(), nullptr, B, T, kLayout, kTheta);
  expect_close(x, expected, 1e-5, 1e-6);
}

TEST(KernelRope, BackwardIsTheForwardsGradient) {
  const auto dout = random_floats(kSize, 2);
  auto dx = dout;
  rope_backward(dx.data(), nullptr, B, T, kLayout, kTheta);
  std::vector<double> x = to_double(random_floats(kSize, 1));
  auto loss = [&](const std::vector<double>& at) {
    const auto y = rope_reference(at);
    double sum = 0;
    for (int64_t i = 0; i < kSize; ++i) sum += y[i] * dout[i];
    return sum;
  };
  for (int64_t i = 0; i < kSize; i += 13) EXPECT_NEAR(dx[i], finite_difference(x, i, loss), 1e-5) << i;
  // And the opposite rotation undoes the forward.
  auto round_trip = dout;
  rope_forward(round_trip.data(), nullptr, B, T, kLayout, kTheta);
  rope_backward(round_trip.data(), nullptr, B, T, kLayout, kTheta);
  expect_close(round_trip, to_double(dout), 1e-5, 1e-6);
}

TEST(KernelRope, Bf16RoundsOncePerValue) {
  const auto x = to_float(to_storage<bf16>(random_floats(kSize, 1)));
  auto xb = to_storage<bf16>(x);
  rope_forward(xb.data(), nullptr, B, T, kLayout, kTheta);
  expect_close(to_float(xb), rope_reference(to_double(x)), 0x1p-8, 1e-6);
}

}  // namespace
}  // namespace mt::kernels
