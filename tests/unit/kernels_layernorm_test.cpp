#include <gtest/gtest.h>

#include <cmath>

#include "kernels/layernorm.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::bitwise_equal;
using testing::expect_close;
using testing::finite_difference;
using testing::random_floats;
using testing::to_double;
using testing::with_threads;

constexpr float kEps = 1e-5f;

// LayerNorm of N rows of x in double.
std::vector<double> layernorm_reference(const std::vector<double>& x, const std::vector<double>& w,
                                        const std::vector<double>& b, int64_t N, int64_t C) {
  std::vector<double> y(N * C);
  for (int64_t i = 0; i < N; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < C; ++j) mean += x[i * C + j] / C;
    for (int64_t j = 0; j < C; ++j) var += (x[i * C + j] - mean) * (x[i * C + j] - mean) / C;
    for (int64_t j = 0; j < C; ++j)
      y[i * C + j] = (x[i * C + j] - mean) / std::sqrt(var + kEps) * w[j] + b[j];
  }
  return y;
}

TEST(KernelLayerNorm, ForwardWithLargeMean) {
  const int64_t N = 7, C = 120;
  auto x = random_floats(N * C, 1);
  for (float& v : x) v += 100.0f;  // a one-pass variance would lose most of its digits here
  const auto w = random_floats(C, 2), b = random_floats(C, 3);
  std::vector<float> y(N * C), mean(N), rstd(N);
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, kEps);
  expect_close(y, layernorm_reference(to_double(x), to_double(w), to_double(b), N, C), 1e-4, 1e-4);
}

TEST(KernelLayerNorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 5, C = 120;
  const auto x = random_floats(N * C, 1), w = random_floats(C, 2), b = random_floats(C, 3);
  const auto dout = random_floats(N * C, 4);
  // Gradients accumulate: start from nonzero values and expect them added to.
  const auto dx0 = random_floats(N * C, 5), dw0 = random_floats(C, 6), db0 = random_floats(C, 7);
  std::vector<float> y(N * C), mean(N), rstd(N), dx = dx0, dw = dw0, db = db0;
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, kEps);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);

  std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b);
  auto loss = [&](const std::vector<double>&) {
    const auto out = layernorm_reference(xd, wd, bd, N, C);
    double sum = 0;
    for (int64_t i = 0; i < N * C; ++i) sum += out[i] * dout[i];
    return sum;
  };
  std::vector<double> dx_ref = to_double(dx0), dw_ref = to_double(dw0), db_ref = to_double(db0);
  for (int64_t i = 0; i < N * C; ++i) dx_ref[i] += finite_difference(xd, i, loss);
  for (int64_t j = 0; j < C; ++j) {
    dw_ref[j] += finite_difference(wd, j, loss);
    db_ref[j] += finite_difference(bd, j, loss);
  }
  expect_close(dx, dx_ref, 1e-4, 1e-4);
  expect_close(dw, dw_ref, 1e-4, 1e-4);
  expect_close(db, db_ref, 1e-4, 1e-4);
}

TEST(KernelLayerNorm, BackwardSameBitsForAnyThreadCount) {
  const int64_t N = 301, C = 136;
  const auto x = random_floats(N * C, 1), w = random_floats(C, 2), b = random_floats(C, 3);
  const auto dout = random_floats(N * C, 4);
  std::vector<float> y(N * C), mean(N), rstd(N);
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, kEps);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    with_threads(threads, [&] {
      std::vector<float> dx(N * C), dw(C), db(C);
      layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                         rstd.data(), N, C);
      dx.insert(dx.end(), dw.begin(), dw.end());
      dx.insert(dx.end(), db.begin(), db.end());
      results.push_back(dx);
    });
  }
  EXPECT_TRUE(bitwise_equal(results[0], results[1]));
  EXPECT_TRUE(bitwise_equal(results[0], results[2]));
}

}  // namespace
}  // namespace mt::kernels
