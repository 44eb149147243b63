#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::to_double;
using testing::with_threads;

constexpr int64_t B = 2, T = 37, C = 120, NH = 5, hs = C / NH, C3 = 3 * C;

// Naive causal attention in double: the full probability matrix of every (b, h).
struct Reference {
  std::vector<double> out, lse, probs;  // probs[b,h,t,s]

  explicit Reference(const std::vector<double>& qkv)
      : out(B * T * C), lse(B * NH * T), probs(B * NH * T * T) {
    const double scale = 1 / std::sqrt(double(hs));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < NH; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          double* p = &probs[((b * NH + h) * T + t) * T];
          double max = -INFINITY, sum = 0;
          for (int64_t s = 0; s <= t; ++s) {
            p[s] = 0;
            for (int64_t i = 0; i < hs; ++i) p[s] += q(qkv, b, t, h, i) * k(qkv, b, s, h, i) * scale;
            max = std::max(max, p[s]);
          }
          for (int64_t s = 0; s <= t; ++s) sum += std::exp(p[s] - max);
          for (int64_t s = 0; s <= t; ++s) p[s] = std::exp(p[s] - max) / sum;
          lse[(b * NH + h) * T + t] = max + std::log(sum);
          for (int64_t i = 0; i < hs; ++i) {
            double o = 0;
            for (int64_t s = 0; s <= t; ++s) o += p[s] * v(qkv, b, s, h, i);
            out[(b * T + t) * C + h * hs + i] = o;
          }
        }
      }
    }
  }

  static int64_t at(int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) {
    return (b * T + t) * C3 + part * C + h * hs + i;
  }
  static double q(const std::vector<double>& x, int64_t b, int64_t t, int64_t h, int64_t i) {
    return x[at(b, t, 0, h, i)];
  }
  static double k(const std::vector<double>& x, int64_t b, int64_t t, int64_t h, int64_t i) {
    return x[at(b, t, 1, h, i)];
  }
  static double v(const std::vector<double>& x, int64_t b, int64_t t, int64_t h, int64_t i) {
    return x[at(b, t, 2, h, i)];
  }

  // The analytic gradient of sum(out * dout) with respect to qkv.
  std::vector<double> backward(const std::vector<double>& qkv, const std::vector<float>& dout) const {
    const double scale = 1 / std::sqrt(double(hs));
    std::vector<double> dqkv(B * T * C3);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < NH; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          const double* p = &probs[((b * NH + h) * T + t) * T];
          const float* dy = &dout[(b * T + t) * C + h * hs];
          std::vector<double> dp(t + 1);
          double pdp = 0;
          for (int64_t s = 0; s <= t; ++s) {
            for (int64_t i = 0; i < hs; ++i) {
              dp[s] += dy[i] * v(qkv, b, s, h, i);
              dqkv[at(b, s, 2, h, i)] += p[s] * dy[i];
            }
            pdp += p[s] * dp[s];
          }
          for (int64_t s = 0; s <= t; ++s) {
            const double ds = p[s] * (dp[s] - pdp) * scale;
            for (int64_t i = 0; i < hs; ++i) {
              dqkv[at(b, t, 0, h, i)] += ds * k(qkv, b, s, h, i);
              dqkv[at(b, s, 1, h, i)] += ds * q(qkv, b, t, h, i);
            }
          }
        }
      }
    }
    return dqkv;
  }
};

std::vector<float> scratch_for_threads() {
  return std::vector<float>(attention_scratch_floats(T, 0, omp_get_max_threads(), DType::f32));
}

TEST(KernelAttention, ForwardMatchesNaive) {
  const auto qkv = random_floats(B * T * C3, 1, 2.0);  // large enough that the softmax is far from flat
  const Reference ref(to_double(qkv));
  std::vector<float> out(B * T * C), lse(B * NH * T), scratch = scratch_for_threads();
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, scratch.data());
  expect_close(out, ref.out, 1e-5, 1e-5);
  expect_close(lse, ref.lse, 1e-5, 1e-5);
}

TEST(KernelAttention, BackwardMatchesAnalyticGradient) {
  const auto qkv = random_floats(B * T * C3, 1, 2.0), dout = random_floats(B * T * C, 2);
  const Reference ref(to_double(qkv));
  std::vector<float> out(B * T * C), lse(B * NH * T), scratch = scratch_for_threads();
  std::vector<float> dqkv(B * T * C3, 123.0f);  // overwritten, not accumulated
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, scratch.data());
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                     scratch.data());
  expect_close(dqkv, ref.backward(to_double(qkv), dout), 1e-4, 1e-4);
}

TEST(KernelAttention, ReferenceGradientMatchesFiniteDifferences) {
  const auto qkv = random_floats(B * T * C3, 1, 2.0), dout = random_floats(B * T * C, 2);
  std::vector<double> x = to_double(qkv);
  const auto analytic = Reference(x).backward(x, dout);
  auto loss = [&](const std::vector<double>& at) {
    const Reference r(at);
    double sum = 0;
    for (int64_t i = 0; i < B * T * C; ++i) sum += r.out[i] * dout[i];
    return sum;
  };
  // A spread of q, k and v coordinates, early and late positions, both batches.
  for (int64_t idx = 5; idx < B * T * C3; idx += 1777) {
    EXPECT_NEAR(analytic[idx], testing::finite_difference(x, idx, loss), 1e-6) << "at " << idx;
  }
}

TEST(KernelAttention, BackwardSameBitsForAnyThreadCount) {
  const auto qkv = random_floats(B * T * C3, 1, 2.0), dout = random_floats(B * T * C, 2);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    with_threads(threads, [&] {
      std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(B * T * C3), scratch = scratch_for_threads();
      attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, scratch.data());
      attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH,
                         scratch.data());
      results.push_back(dqkv);
    });
  }
  EXPECT_TRUE(bitwise_equal(results[0], results[1]));
  EXPECT_TRUE(bitwise_equal(results[0], results[2]));
}

}  // namespace
}  // namespace mt::kernels
