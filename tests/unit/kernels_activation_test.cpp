#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "kernels/activation.h"
#include "kernels/vec_math.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::expect_close;
using testing::to_double;

double gelu_reference(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// Inputs from -12 to 12 in odd steps, so both tails and the region around 0 are covered.
std::vector<float> gelu_inputs() {
  std::vector<float> x;
  for (float v = -12.0f; v <= 12.0f; v += 0.0137f) x.push_back(v);
  return x;
}

TEST(KernelActivation, VexpWithinFewUlp) {
  for (float x = -87.0f; x <= 88.0f; x += 0.00731f) {
    const double expected = std::exp(static_cast<double>(x));
    ASSERT_NEAR(vexp(x), expected, 3e-7 * expected) << "x = " << x;
  }
  EXPECT_EQ(vexp(0.0f), 1.0f);
  EXPECT_GT(vexp(-1000.0f), 0.0f);  // clamped, never 0: a softmax sum stays positive
  EXPECT_TRUE(std::isfinite(vexp(1000.0f)));
}

TEST(KernelActivation, VtanhMatchesTanh) {
  for (float x = -20.0f; x <= 20.0f; x += 0.00917f) ASSERT_NEAR(vtanh(x), std::tanh(double(x)), 2e-7);
}

TEST(KernelActivation, GeluForward) {
  const auto x = gelu_inputs();
  std::vector<float> y(x.size());
  gelu_forward(y.data(), x.data(), x.size());
  std::vector<double> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i) expected[i] = gelu_reference(x[i]);
  expect_close(y, expected, 1e-6, 1e-6);
}

TEST(KernelActivation, GeluBackwardMatchesFiniteDifferencesInPlace) {
  const auto x = gelu_inputs();
  auto grad = testing::random_floats(x.size(), 7);
  std::vector<double> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-5;
    expected[i] = grad[i] * (gelu_reference(x[i] + h) - gelu_reference(x[i] - h)) / (2 * h);
  }
  gelu_backward(grad.data(), x.data(), grad.data(), x.size());  // dinp aliases dout
  expect_close(grad, expected, 1e-5, 1e-5);
}

}  // namespace
}  // namespace mt::kernels
