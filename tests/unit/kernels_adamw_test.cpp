#include <gtest/gtest.h>

#include <cmath>

#include "kernels/adamw.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::expect_close;
using testing::random_floats;
using testing::to_double;
using testing::with_threads;

TEST(KernelAdamW, MatchesTorchFormulaOverSteps) {
  const int64_t n = 1003;
  auto param = random_floats(n, 1);
  std::vector<float> m(n), v(n);
  std::vector<double> p_ref = to_double(param), m_ref(n), v_ref(n);
  for (int64_t step = 1; step <= 5; ++step) {
    const auto grad = random_floats(n, 10 + step, 0.1);
    const AdamWStep s{6e-4f, 0.9f, 0.95f, 1e-8f, step % 2 ? 0.1f : 0.0f, step};
    adamw_update<float, float, float>(nullptr, param.data(), grad.data(), m.data(), v.data(), n, s, {});
    const double bc1 = 1 - std::pow(double(s.beta1), step), bc2 = 1 - std::pow(double(s.beta2), step);
    for (int64_t i = 0; i < n; ++i) {
      p_ref[i] *= 1 - double(s.lr) * s.weight_decay;
      m_ref[i] = s.beta1 * m_ref[i] + (1 - double(s.beta1)) * grad[i];
      v_ref[i] = s.beta2 * v_ref[i] + (1 - double(s.beta2)) * grad[i] * grad[i];
      p_ref[i] -= s.lr / bc1 * m_ref[i] / (std::sqrt(v_ref[i]) / std::sqrt(bc2) + s.eps);
    }
    expect_close(m, m_ref, 1e-5, 1e-9);
    expect_close(v, v_ref, 1e-5, 1e-12);
    expect_close(param, p_ref, 1e-6, 1e-7);
  }
}

TEST(KernelAdamW, FirstStepMovesEachWeightByLearningRate) {
  // At step 1, m/sqrt(v) after bias correction is sign(g): every weight moves by lr (eps aside).
  std::vector<float> param = {1.0f, -2.0f, 0.5f}, grad = {0.3f, -4.0f, 1e-3f}, m(3), v(3);
  adamw_update<float, float, float>(nullptr, param.data(), grad.data(), m.data(), v.data(), 3,
                                    {0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 1}, {});
  EXPECT_NEAR(param[0], 0.99f, 1e-6);
  EXPECT_NEAR(param[1], -1.99f, 1e-6);
  EXPECT_NEAR(param[2], 0.49f, 1e-5);
}

TEST(KernelAdamW, SumOfSquaresSameBitsForAnyThreadCount) {
  const int64_t n = 100003;  // not a multiple of the chunk size
  const auto x = random_floats(n, 3);
  double expected = 0;
  for (float f : x) expected += double(f) * f;
  std::vector<double> sums;
  for (int threads : {1, 2, 3}) with_threads(threads, [&] { sums.push_back(sum_of_squares(x.data(), n)); });
  EXPECT_NEAR(sums[0], expected, 1e-12 * expected);
  EXPECT_EQ(sums[0], sums[1]);
  EXPECT_EQ(sums[0], sums[2]);
  EXPECT_EQ(sum_of_squares(x.data(), 0), 0.0);
}

}  // namespace
}  // namespace mt::kernels
