// SwiGLU against silu(gate) * up in double: forward, both halves of the input gradient, 16-bit storage.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/activation.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::expect_close;
using testing::random_floats;
using testing::to_double;
using testing::to_float;
using testing::to_storage;

constexpr int64_t M = 5, I = 1100;  // I spans more than one 1024-value chunk

double silu(double x) {
  return x / (1 + std::exp(-x));
}

std::vector<double> swiglu_reference(const std::vector<double>& x) {
  std::vector<double> y(M * I);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t j = 0; j < I; ++j) y[r * I + j] = silu(x[r * 2 * I + j]) * x[r * 2 * I + I + j];
  return y;
}

TEST(KernelSwiGlu, ForwardMatchesReference) {
  const auto x = random_floats(M * 2 * I, 1, 4.0);
  std::vector<float> y(M * I);
  swiglu_forward(y.data(), x.data(), M, I);
  expect_close(y, swiglu_reference(to_double(x)), 1e-6, 1e-6);
}

TEST(KernelSwiGlu, BackwardMatchesAnalyticGradient) {
  const auto x = random_floats(M * 2 * I, 1, 4.0), dout = random_floats(M * I, 2);
  std::vector<float> dx(M * 2 * I, 123.0f);  // overwritten
  swiglu_backward(dx.data(), x.data(), dout.data(), M, I);
  std::vector<double> expected(M * 2 * I);
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t j = 0; j < I; ++j) {
      const double g = x[r * 2 * I + j], u = x[r * 2 * I + I + j], s = 1 / (1 + std::exp(-g));
      expected[r * 2 * I + j] = dout[r * I + j] * u * (s + g * s * (1 - s));
      expected[r * 2 * I + I + j] = dout[r * I + j] * silu(g);
    }
  }
  expect_close(dx, expected, 1e-5, 1e-6);
}

TEST(KernelSwiGlu, Bf16RoundsOncePerValue) {
  const auto x = to_float(to_storage<bf16>(random_floats(M * 2 * I, 1, 4.0)));
  const auto xb = to_storage<bf16>(x);
  std::vector<bf16> yb(M * I);
  swiglu_forward(yb.data(), xb.data(), M, I);
  expect_close(to_float(yb), swiglu_reference(to_double(x)), 0x1p-8, 1e-6);
}

}  // namespace
}  // namespace mt::kernels
