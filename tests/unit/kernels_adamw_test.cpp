#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/adamw.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::to_double;
using testing::to_float;
using testing::to_storage;
using testing::with_threads;

// The spacing of T's values at x; 0 for float, whose rounding the relative tolerances already cover.
template <typename T>
double ulp(double x) {
  if constexpr (std::is_same_v<T, float>) {
    return 0;
  } else {
    static_assert(std::is_same_v<T, bf16>);
    int exponent;
    std::frexp(x, &exponent);  // |x| = f 2^exponent with f in [0.5, 1)
    return std::ldexp(1.0, std::max(exponent - 1, -126) - 7);
  }
}

// Within atol + rtol |expected| + `ulps` spacings of the storage type: half a spacing when stored rounded to
// nearest, a whole one when rounded stochastically.
template <typename T>
void expect_stored_close(const std::vector<T>& actual, const std::vector<double>& expected, double ulps,
                         double rtol, double atol, const char* what) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const double tolerance = atol + rtol * std::abs(expected[i]) + ulps * ulp<T>(expected[i]);
    ASSERT_NEAR(to_f32(actual[i]), expected[i], tolerance) << what << " at index " << i;
  }
}

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

// The fp32 kernel's arithmetic as it stood before the 16-bit layouts, one element at a time, with the
// multiply-adds GCC fused there written as fma: fp32 training must not change by a bit.
void legacy_fp32_step(std::vector<float>& w, const std::vector<float>& grad, std::vector<float>& m,
                      std::vector<float>& v, const AdamWStep& s) {
  const double lr = s.lr, beta1 = s.beta1, beta2 = s.beta2;
  const float decay = static_cast<float>(1.0 - lr * s.weight_decay);
  const float m_weight = static_cast<float>(1.0 - beta1), v_weight = static_cast<float>(1.0 - beta2);
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(s.step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(s.step));
  const float neg_step_size = static_cast<float>(-(lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  for (size_t i = 0; i < w.size(); ++i) {
    const float g = grad[i] * s.grad_multiplier;
    const float p = w[i] * decay;
    const float mi =
        m_weight < 0.5f ? std::fma(m_weight, g - m[i], m[i]) : std::fma(-(g - m[i]), 1.0f - m_weight, g);
    const float vi = std::fma(v[i], s.beta2, v_weight * g * g);
    const float denom = std::sqrt(vi) / bias_correction2_sqrt + s.eps;
    m[i] = mi;
    v[i] = vi;
    w[i] = std::fma(neg_step_size, mi / denom, p);
  }
}

TEST(KernelAdamW, Fp32LayoutKeepsItsBits) {
  const int64_t n = 1003;
  const auto w0 = random_floats(n, 1);
  for (int threads : {1, 2, 3}) {
    for (bool use_master : {false, true}) {
      std::vector<float> w_ref = w0, m_ref(n), v_ref(n), param = w0, master = w0, m(n), v(n);
      for (int64_t step = 1; step <= 6; ++step) {
        const auto grad = random_floats(n, 10 + step, 0.1);
        // beta1 = 0.2 takes lerp's other branch; step 4 scales the gradients.
        const AdamWStep s{6e-4f, step == 5 ? 0.2f : 0.9f, 0.95f, 1e-8f, step % 2 ? 0.1f : 0.0f,
                          step,  step == 4 ? 0.37f : 1.0f};
        legacy_fp32_step(w_ref, grad, m_ref, v_ref, s);
        with_threads(threads, [&] {
          adamw_update<float, float, float>(use_master ? master.data() : nullptr, param.data(), grad.data(),
                                            m.data(), v.data(), n, s, {});
        });
        ASSERT_TRUE(bitwise_equal(param, w_ref)) << threads << " threads, step " << step;
        if (use_master) {
          ASSERT_TRUE(bitwise_equal(master, w_ref));
        }
        ASSERT_TRUE(bitwise_equal(m, m_ref));
        ASSERT_TRUE(bitwise_equal(v, v_ref));
      }
    }
  }
}

template <typename P_, typename G_, typename M_>
struct Layout {
  using P = P_;
  using G = G_;
  using M = M_;
};

struct LayoutName {
  template <typename L>
  static std::string GetName(int) {
    const auto name = [](DType t) { return std::string(dtype_name(t)); };
    return name(dtype_of<typename L::P>()) + "_" + name(dtype_of<typename L::G>()) + "_" +
           name(dtype_of<typename L::M>());
  }
};

template <typename L>
class KernelAdamWLayout : public ::testing::Test {};

using Layouts =
    ::testing::Types<Layout<float, float, float>, Layout<float, float, bf16>, Layout<float, bf16, float>,
                     Layout<float, bf16, bf16>, Layout<bf16, float, float>, Layout<bf16, float, bf16>,
                     Layout<bf16, bf16, float>, Layout<bf16, bf16, bf16>, Layout<f16, float, float>,
                     Layout<f16, float, bf16>, Layout<f16, bf16, float>, Layout<f16, bf16, bf16>>;
TYPED_TEST_SUITE(KernelAdamWLayout, Layouts, LayoutName);

// Four steps, each checked against the same math in double started from the state the kernel stored.
template <typename P, typename G, typename M>
void check_against_reference(bool use_master, bool stochastic_moments) {
  const int64_t n = 1003;
  const auto w0 = random_floats(n, 1);
  std::vector<float> master = w0;
  std::vector<P> param = to_storage<P>(w0);
  std::vector<M> m = to_storage<M>(std::vector<float>(n)), v = m;
  for (int64_t step = 1; step <= 4; ++step) {
    const std::vector<G> grad = to_storage<G>(random_floats(n, 10 + step, 0.1));
    const AdamWStep s{6e-4f, 0.9f, 0.95f, 1e-8f, step % 2 ? 0.1f : 0.0f, step, step == 3 ? 0.37f : 1.0f};
    const double bc1 = 1 - std::pow(double(s.beta1), step), bc2 = 1 - std::pow(double(s.beta2), step);
    std::vector<double> w_ref(n), m_ref(n), v_ref(n);
    for (int64_t i = 0; i < n; ++i) {
      const double g = double(to_f32(grad[i])) * s.grad_multiplier;
      const double w = use_master ? master[i] : to_f32(param[i]);
      m_ref[i] = s.beta1 * double(to_f32(m[i])) + (1 - double(s.beta1)) * g;
      v_ref[i] = s.beta2 * double(to_f32(v[i])) + (1 - double(s.beta2)) * g * g;
      w_ref[i] = w * (1 - double(s.lr) * s.weight_decay) -
                 s.lr / bc1 * m_ref[i] / (std::sqrt(v_ref[i]) / std::sqrt(bc2) + s.eps);
    }
    adamw_update<P, G, M>(use_master ? master.data() : nullptr, param.data(), grad.data(), m.data(), v.data(),
                          n, s, {stochastic_moments, 100 + static_cast<uint64_t>(step), 0});
    const double moment_ulps = stochastic_moments ? 1.0 : 0.5;
    expect_stored_close(m, m_ref, moment_ulps, 1e-5, 1e-9, "m");
    expect_stored_close(v, v_ref, moment_ulps, 1e-5, 1e-12, "v");
    if (use_master) {
      expect_close(master, w_ref, 1e-6, 1e-7);
      ASSERT_TRUE(bitwise_equal(param, to_storage<P>(master)))
          << "param is not the master rounded to nearest";
    } else if constexpr (!std::is_same_v<P, f16>) {
      expect_stored_close(param, w_ref, std::is_same_v<P, float> ? 0.0 : 1.0, 1e-6, 1e-7, "weight");
    }
  }
}

TYPED_TEST(KernelAdamWLayout, MatchesDoubleReferenceWithMaster) {
  using L = TypeParam;
  check_against_reference<typename L::P, typename L::G, typename L::M>(true, false);
  if (std::is_same_v<typename L::M, bf16>) {
    check_against_reference<typename L::P, typename L::G, typename L::M>(true, true);
  }
}

TYPED_TEST(KernelAdamWLayout, MatchesDoubleReferenceWithoutMaster) {
  using P = typename TypeParam::P;
  using G = typename TypeParam::G;
  using M = typename TypeParam::M;
  if constexpr (std::is_same_v<P, f16>) {
    std::vector<P> param(4);
    std::vector<G> grad(4);
    std::vector<M> m(4), v(4);
    const AdamWStep s{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1};
    const auto update = [&] {
      adamw_update<P, G, M>(nullptr, param.data(), grad.data(), m.data(), v.data(), 4, s, {});
    };
    EXPECT_THROW(update(), std::invalid_argument);
  } else {
    check_against_reference<P, G, M>(false, false);
    if (std::is_same_v<M, bf16>) check_against_reference<P, G, M>(false, true);
  }
}

TYPED_TEST(KernelAdamWLayout, SameBitsForAnyThreadCount) {
  using P = typename TypeParam::P;
  using G = typename TypeParam::G;
  using M = typename TypeParam::M;
  const int64_t n = 100003;  // the threads' ranges end inside vectors
  const auto w0 = random_floats(n, 1);
  for (bool use_master : {true, false}) {
    if (std::is_same_v<P, f16> && !use_master) continue;
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      std::vector<float> master = w0;
      std::vector<P> param = to_storage<P>(w0);
      std::vector<M> m = to_storage<M>(std::vector<float>(n)), v = m;
      for (int64_t step = 1; step <= 2; ++step) {
        const std::vector<G> grad = to_storage<G>(random_floats(n, 10 + step, 0.1));
        with_threads(threads, [&] {
          adamw_update<P, G, M>(use_master ? master.data() : nullptr, param.data(), grad.data(), m.data(),
                                v.data(), n, {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step}, {true, 7, 3});
        });
      }
      std::vector<float> all = master;
      for (const auto& part : {to_float(param), to_float(m), to_float(v)})
        all.insert(all.end(), part.begin(), part.end());
      results.push_back(std::move(all));
    }
    EXPECT_TRUE(bitwise_equal(results[0], results[1])) << (use_master ? "master" : "no master");
    EXPECT_TRUE(bitwise_equal(results[0], results[2])) << (use_master ? "master" : "no master");
  }
}

TYPED_TEST(KernelAdamWLayout, GradMultiplierScalesGradients) {
  using P = typename TypeParam::P;
  using G = typename TypeParam::G;
  using M = typename TypeParam::M;
  // Scaling by a power of two is exact in every storage type, so both runs see the same fp32 gradients.
  const int64_t n = 1003;
  const auto g = random_floats(n, 4, 0.1);
  std::vector<float> quarter(n);
  for (int64_t i = 0; i < n; ++i) quarter[i] = g[i] * 0.25f;
  const auto run = [&](const std::vector<float>& grad, float multiplier) {
    std::vector<float> master = random_floats(n, 1);
    std::vector<P> param = to_storage<P>(master);
    std::vector<M> m = to_storage<M>(std::vector<float>(n)), v = m;
    const std::vector<G> stored_grad = to_storage<G>(grad);
    adamw_update<P, G, M>(master.data(), param.data(), stored_grad.data(), m.data(), v.data(), n,
                          {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, multiplier}, {});
    std::vector<float> all = master;
    for (const auto& part : {to_float(param), to_float(m), to_float(v)})
      all.insert(all.end(), part.begin(), part.end());
    return all;
  };
  EXPECT_TRUE(bitwise_equal(run(g, 0.25f), run(quarter, 1.0f)));
  EXPECT_FALSE(bitwise_equal(run(g, 1.0f), run(quarter, 1.0f)));  // the moments see the scale
}

// bf16 weights without a master, and bf16 moments, all rounded stochastically: two steps.
struct StochasticRun {
  std::vector<bf16> param, m, v;
};
StochasticRun run_stochastic(uint64_t seed, bool stochastic_moments, int64_t n = 4099) {
  StochasticRun r{to_storage<bf16>(random_floats(n, 1)), std::vector<bf16>(n, bf16{0}),
                  std::vector<bf16>(n, bf16{0})};
  for (int64_t step = 1; step <= 2; ++step) {
    const auto grad = to_storage<bf16>(random_floats(n, 10 + step, 0.1));
    adamw_update<bf16, bf16, bf16>(nullptr, r.param.data(), grad.data(), r.m.data(), r.v.data(), n,
                                   {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step}, {stochastic_moments, seed, 0});
  }
  return r;
}

template <typename T>
int64_t count_different(const std::vector<T>& a, const std::vector<T>& b) {
  int64_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return count;
}

TEST(KernelAdamW, StochasticRoundingIsReproducibleAndSeeded) {
  const StochasticRun a = run_stochastic(1, true), b = run_stochastic(1, true), c = run_stochastic(2, true);
  EXPECT_TRUE(bitwise_equal(a.param, b.param));
  EXPECT_TRUE(bitwise_equal(a.m, b.m));
  EXPECT_TRUE(bitwise_equal(a.v, b.v));
  // A value inside a bf16 gap rounds differently under two seeds with probability 2p(1-p), about 1/3 on
  // average over uniform positions p.
  const int64_t n = static_cast<int64_t>(a.param.size());
  EXPECT_GT(count_different(a.param, c.param), n / 10);
  EXPECT_GT(count_different(a.m, c.m), n / 10);
  EXPECT_GT(count_different(a.v, c.v), n / 10);
  // Nearest-even moments differ from stochastic ones; the weights stay stochastic either way.
  const StochasticRun nearest = run_stochastic(1, false);
  EXPECT_GT(count_different(a.m, nearest.m), n / 10);
}

TEST(KernelAdamW, PiecewiseUpdateMatchesOneCall) {
  // Tensors are updated one by one with rounding.index at their offset: the bits must not depend on it.
  const int64_t n = 1000, split = 377, offset = 5000;
  const auto w0 = to_storage<bf16>(random_floats(n, 1));
  const auto grad = to_storage<bf16>(random_floats(n, 2, 0.1));
  const AdamWStep s{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
  std::vector<bf16> whole = w0, pieces = w0, m1(n, bf16{0}), v1(n, bf16{0}), m2 = m1, v2 = v1;
  adamw_update<bf16, bf16, bf16>(nullptr, whole.data(), grad.data(), m1.data(), v1.data(), n, s,
                                 {true, 9, offset});
  adamw_update<bf16, bf16, bf16>(nullptr, pieces.data(), grad.data(), m2.data(), v2.data(), split, s,
                                 {true, 9, offset});
  adamw_update<bf16, bf16, bf16>(nullptr, pieces.data() + split, grad.data() + split, m2.data() + split,
                                 v2.data() + split, n - split, s, {true, 9, offset + split});
  EXPECT_TRUE(bitwise_equal(whole, pieces));
  EXPECT_TRUE(bitwise_equal(m1, m2));
  EXPECT_TRUE(bitwise_equal(v1, v2));
}

TEST(KernelAdamW, StochasticWeightsFollowUpdatesFarBelowTheirPrecision) {
  // A constant gradient moves every weight by lr per step (bias-corrected m / sqrt(v) is 1). Twenty steps of
  // 1e-4 from 1.0 stay under bf16's spacing there (2^-8): rounded to nearest, the weights would never move.
  const int64_t n = 4096, steps = 20;
  const float lr = 1e-4f;
  std::vector<bf16> param(n, round_to<bf16>(1.0f)), master_param = param;
  std::vector<float> master(n, 1.0f), grad(n, 1.0f), m1(n), v1(n), m2(n), v2(n);
  for (int64_t step = 1; step <= steps; ++step) {
    const AdamWStep s{lr, 0.9f, 0.95f, 1e-8f, 0.0f, step};
    const uint64_t seed = 1000 + static_cast<uint64_t>(step);  // as callers do: a fresh seed every step
    adamw_update<bf16, float, float>(nullptr, param.data(), grad.data(), m1.data(), v1.data(), n, s,
                                     {false, seed, 0});
    adamw_update<bf16, float, float>(master.data(), master_param.data(), grad.data(), m2.data(), v2.data(), n,
                                     s, {false, seed, 0});
  }
  const double expected = 1.0 - steps * double(lr);
  double sum = 0, sum_sq = 0;
  for (bf16 w : param) {
    sum += to_f32(w);
    sum_sq += double(to_f32(w)) * to_f32(w);
  }
  const double mean = sum / n, standard_error = std::sqrt((sum_sq / n - mean * mean) / n);
  EXPECT_GT(standard_error, 0.0);  // the weights did move, some of them
  EXPECT_NEAR(mean, expected, 5 * standard_error);
  // With a master the fp32 copy carries the small steps and the bf16 weights are its nearest rounding.
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(master[i], expected, 1e-6);
  EXPECT_TRUE(bitwise_equal(master_param, to_storage<bf16>(master)));
}

TEST(KernelAdamW, SumOfSquaresBf16SameBitsForAnyThreadCount) {
  const int64_t n = 100003;
  const auto x = to_storage<bf16>(random_floats(n, 3));
  double expected = 0;
  for (bf16 b : x) expected += double(to_f32(b)) * to_f32(b);
  std::vector<double> sums;
  for (int threads : {1, 2, 3}) with_threads(threads, [&] { sums.push_back(sum_of_squares(x.data(), n)); });
  EXPECT_NEAR(sums[0], expected, 1e-12 * expected);
  EXPECT_EQ(sums[0], sums[1]);
  EXPECT_EQ(sums[0], sums[2]);
}

TEST(KernelAdamW, SumOfSquaresIsNonFiniteExactlyForNonFiniteInput) {
  const int64_t n = 10000;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, -inf, nan}) {
    auto x = random_floats(n, 5);
    x[n - 3] = bad;  // in the last chunk, past a vector boundary
    EXPECT_FALSE(std::isfinite(sum_of_squares(x.data(), n))) << bad;
    const auto half = to_storage<bf16>(x);
    EXPECT_FALSE(std::isfinite(sum_of_squares(half.data(), n))) << bad;
  }
  // Squares are summed in double: the largest finite values do not overflow.
  const std::vector<float> large(n, std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isfinite(sum_of_squares(large.data(), n)));
  const auto large_half = to_storage<bf16>(std::vector<float>(n, 3e38f));
  EXPECT_TRUE(std::isfinite(sum_of_squares(large_half.data(), n)));
}

}  // namespace
}  // namespace mt::kernels
