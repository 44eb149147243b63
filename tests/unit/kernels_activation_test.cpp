#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <numbers>

#include "backend/cpu/activation.h"
#include "backend/cpu/convert.h"
#include "backend/cpu/typed_io.h"
#include "backend/cpu/vec_math.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

// vexp, vtanh and the scalar conversions as the generic level builds them; the row conversions through the
// convert kernel, at the level the test runs at.
using namespace MT_ISA;

using testing::bitwise_equal;
using testing::expect_close;
using testing::to_double;
using testing::to_float;
using testing::to_storage;
using testing::with_threads;

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

// typed_io.h serves every kernel; its conversions are tested here, beside the element-wise kernel: the
// per-value ones directly, the row ones (convert_n, with each level's instructions) through convert.

// Every 16-bit pattern, through the per-value and the row conversions.
template <typename T>
void expect_widen_matches_half_h() {
  std::vector<T> x(65536);
  for (uint32_t bits = 0; bits < 65536; ++bits) x[bits] = T{static_cast<uint16_t>(bits)};
  std::vector<float> row(x.size());
  convert(row.data(), x.data(), static_cast<int64_t>(x.size()));
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float expected = to_f32(x[bits]);
    for (float actual : {widen(x[bits]), row[bits]}) {
      if (std::isnan(expected)) {
        ASSERT_TRUE(std::isnan(actual)) << "bits " << bits;
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(actual), std::bit_cast<uint32_t>(expected)) << "bits " << bits;
      }
    }
  }
}

TEST(KernelTypedIo, WidenMatchesHalfH) {
  expect_widen_matches_half_h<bf16>();
  expect_widen_matches_half_h<f16>();
}

// Where rounding can go wrong: every value of T, the midpoints to its upper neighbour (ties) and the floats
// right next to both; then an even spread of all float bit patterns, which also puts fp32 subnormals among
// normal values in the blocks convert_n converts together.
template <typename T>
std::vector<float> narrow_inputs() {
  std::vector<float> x;
  for (uint32_t bits = 0; bits < 65535; ++bits) {
    const float v = to_f32(T{static_cast<uint16_t>(bits)});
    const float next = to_f32(T{static_cast<uint16_t>(bits + 1)});
    if (!std::isfinite(v) || !std::isfinite(next)) continue;
    const float mid = (v + next) / 2;  // exact: one bit more than T has
    for (float m : {v, mid})
      x.insert(x.end(), {m, std::nextafter(m, INFINITY), std::nextafter(m, -INFINITY)});
  }
  for (uint64_t bits = 0; bits < (1ull << 32); bits += 997)
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  return x;
}

template <typename T>
void expect_narrow_matches_half_h() {
  const std::vector<float> x = narrow_inputs<T>();
  std::vector<T> row(x.size());
  convert(row.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t expected = round_to<T>(x[i]).bits;
    for (uint16_t actual : {narrow<T>(x[i]).bits, row[i].bits}) {
      if (std::isnan(x[i])) {
        ASSERT_TRUE(std::isnan(to_f32(T{actual}))) << "NaN became " << actual;
      } else {
        ASSERT_EQ(actual, expected) << "x = " << x[i] << " (bits " << std::bit_cast<uint32_t>(x[i]) << ")";
      }
    }
  }
}

TEST(KernelTypedIo, NarrowMatchesHalfH) {
  expect_narrow_matches_half_h<bf16>();
  expect_narrow_matches_half_h<f16>();
}

// Runs forward and in-place backward in T, and in fp32 on the same values: the arithmetic is fp32 in both, so
// they differ by the final rounding to T, at most half a unit in its last place: rtol (2^-8 for bf16, 2^-11
// for f16), or atol among f16 subnormals. Also checks that 1, 2 and 3 threads give the same bits.
template <typename T>
void expect_gelu_matches_fp32(double rtol, double atol) {
  // The sweep, then enough random values that the threads split several chunks, the last one partial.
  std::vector<float> inputs = gelu_inputs();
  const auto more = testing::random_floats(4 * 1024 + 5, 8, 3.0);
  inputs.insert(inputs.end(), more.begin(), more.end());
  const auto x = to_float(to_storage<T>(inputs));
  const auto grad = to_float(to_storage<T>(testing::random_floats(x.size(), 7)));
  std::vector<float> y(x.size()), dx = grad;
  gelu_forward(y.data(), x.data(), x.size());
  gelu_backward(dx.data(), x.data(), dx.data(), x.size());

  const auto xt = to_storage<T>(x);
  std::vector<std::vector<float>> ys, dxs;
  for (int threads : {1, 2, 3}) {
    with_threads(threads, [&] {
      std::vector<T> yt(x.size()), dxt = to_storage<T>(grad);
      gelu_forward(yt.data(), xt.data(), x.size());
      gelu_backward(dxt.data(), xt.data(), dxt.data(), x.size());
      ys.push_back(to_float(yt));
      dxs.push_back(to_float(dxt));
    });
  }
  expect_close(ys[0], to_double(y), rtol, atol);
  expect_close(dxs[0], to_double(dx), rtol, atol);
  for (int i : {1, 2}) {
    EXPECT_TRUE(bitwise_equal(ys[i], ys[0]));
    EXPECT_TRUE(bitwise_equal(dxs[i], dxs[0]));
  }
}

TEST(KernelActivation, GeluBf16MatchesFp32) {
  expect_gelu_matches_fp32<bf16>(0x1p-8, 0);
}

TEST(KernelActivation, GeluF16MatchesFp32) {
  expect_gelu_matches_fp32<f16>(0x1p-11, 0x1p-25);
}

}  // namespace
}  // namespace mt::kernels
