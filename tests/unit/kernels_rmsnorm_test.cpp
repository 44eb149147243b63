// RMSNorm against a double reference: forward values, gradients by finite differences (accumulating into
// what dinp and dweight hold), 16-bit storage near fp32, and the same bits for any thread count.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/layernorm.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::bitwise_equal;
using testing::expect_close;
using testing::finite_difference;
using testing::random_floats;
using testing::to_double;
using testing::to_float;
using testing::to_storage;
using testing::with_threads;

constexpr float kRmsEps = 1e-6f;
constexpr int64_t N = 6, C = 136;  // C not a multiple of the vector width

std::vector<double> rmsnorm_reference(const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> y(N * C);
  for (int64_t i = 0; i < N; ++i) {
    double ms = 0;
    for (int64_t j = 0; j < C; ++j) ms += x[i * C + j] * x[i * C + j] / C;
    for (int64_t j = 0; j < C; ++j) y[i * C + j] = x[i * C + j] / std::sqrt(ms + kRmsEps) * w[j];
  }
  return y;
}

TEST(KernelRmsNorm, ForwardMatchesReference) {
  const auto x = random_floats(N * C, 1, 3.0), w = random_floats(C, 2);
  std::vector<float> y(N * C), rstd(N);
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, kRmsEps);
  expect_close(y, rmsnorm_reference(to_double(x), to_double(w)), 1e-5, 1e-6);
}

TEST(KernelRmsNorm, BackwardMatchesFiniteDifferences) {
  const auto x = random_floats(N * C, 1), w = random_floats(C, 2), dout = random_floats(N * C, 3);
  const auto dx0 = random_floats(N * C, 4), dw0 = random_floats(C, 5);
  std::vector<float> y(N * C), rstd(N), dx = dx0, dw = dw0;
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, kRmsEps);
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  std::vector<double> xd = to_double(x), wd = to_double(w);
  auto loss = [&](const std::vector<double>&) {
    const auto out = rmsnorm_reference(xd, wd);
    double sum = 0;
    for (int64_t i = 0; i < N * C; ++i) sum += out[i] * dout[i];
    return sum;
  };
  for (int64_t i = 0; i < N * C; i += 37)
    EXPECT_NEAR(dx[i] - dx0[i], finite_difference(xd, i, loss), 1e-4) << "dx at " << i;
  for (int64_t j = 0; j < C; j += 7)
    EXPECT_NEAR(dw[j] - dw0[j], finite_difference(wd, j, loss), 1e-4) << "dw at " << j;
}

TEST(KernelRmsNorm, Bf16NearFp32AndThreadIndependent) {
  const auto x = to_float(to_storage<bf16>(random_floats(N * C, 1)));
  const auto w = to_float(to_storage<bf16>(random_floats(C, 2)));
  const auto dout = to_float(to_storage<bf16>(random_floats(N * C, 3)));
  std::vector<float> y(N * C), rstd(N), dx(N * C), dw(C);
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, kRmsEps);
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 3}) {
    with_threads(threads, [&] {
      const auto xb = to_storage<bf16>(x), wb = to_storage<bf16>(w), db = to_storage<bf16>(dout);
      std::vector<bf16> yb(N * C), dxb(N * C);
      std::vector<float> rb(N), dwb(C);
      rmsnorm_forward(yb.data(), rb.data(), xb.data(), wb.data(), N, C, kRmsEps);
      rmsnorm_backward(dxb.data(), dwb.data(), db.data(), xb.data(), wb.data(), rb.data(), N, C);
      expect_close(to_float(yb), to_double(y), 0x1p-8, 1e-6);
      expect_close(to_float(dxb), to_double(dx), 0x1p-7, 1e-3);
      expect_close(dwb, to_double(dw), 1e-5, 1e-5);
      results.push_back(to_float(dxb));
      results.push_back(dwb);
    });
  }
  EXPECT_TRUE(bitwise_equal(results[0], results[2]));
  EXPECT_TRUE(bitwise_equal(results[1], results[3]));
}

}  // namespace
}  // namespace mt::kernels
