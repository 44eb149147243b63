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

std::vector<float> scratch_for_threads(DType dtype = DType::f32) {
  return std::vector<float>(attention_scratch_floats(T, hs, omp_get_max_threads(), dtype));
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

// x rounded to the storage type X, and back: to_float(to_storage<X>(x)) is what a fp32 kernel sees of it.
template <typename X>
std::vector<X> to_storage(const std::vector<float>& x) {
  std::vector<X> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = round_to<X>(x[i]);
  return y;
}

template <typename X>
std::vector<float> to_float(const std::vector<X>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = to_f32(x[i]);
  return y;
}

struct AttentionResult {
  std::vector<float> out, lse, dqkv;
};

// Forward, then backward from the stored out, with storage type X; results as fp32.
template <typename X>
AttentionResult run_attention(const std::vector<float>& qkv, const std::vector<float>& dout) {
  const auto qkv_x = to_storage<X>(qkv), dout_x = to_storage<X>(dout);
  std::vector<X> out(B * T * C), dqkv(B * T * C3, round_to<X>(123.0f));  // dqkv is overwritten
  std::vector<float> lse(B * NH * T), scratch = scratch_for_threads(dtype_of<X>());
  attention_forward(out.data(), lse.data(), qkv_x.data(), B, T, C, NH, scratch.data());
  attention_backward(dqkv.data(), dout_x.data(), qkv_x.data(), out.data(), lse.data(), B, T, C, NH,
                     scratch.data());
  return {to_float(out), lse, to_float(dqkv)};
}

// The 16-bit kernels upcast each (batch, head) and run the fp32 arithmetic, accumulating dk and dv in fp32,
// so each stored value is the fp32 kernel's result rounded once: within half an ulp of X. The fp32
// backward gets the same stored out as the 16-bit one (its rounding is part of the input). 1, 2 and 3
// threads must give the same bits.
template <typename X>
void expect_attention_matches_fp32(double half_ulp) {
  const auto qkv = to_float(to_storage<X>(random_floats(B * T * C3, 1, 2.0)));
  const auto dout = to_float(to_storage<X>(random_floats(B * T * C, 2)));
  std::vector<AttentionResult> results;
  for (int threads : {1, 2, 3})
    with_threads(threads, [&] { results.push_back(run_attention<X>(qkv, dout)); });
  const AttentionResult& r = results[0];

  const AttentionResult ref = run_attention<float>(qkv, dout);
  std::vector<float> ref_dqkv(B * T * C3), scratch = scratch_for_threads();
  attention_backward(ref_dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), B, T, C, NH,
                     scratch.data());
  expect_close(r.out, to_double(ref.out), half_ulp, 1e-6);
  expect_close(r.lse, to_double(ref.lse), 1e-6, 1e-6);
  expect_close(r.dqkv, to_double(ref_dqkv), half_ulp, 1e-5);
  for (int i : {1, 2}) {
    EXPECT_TRUE(bitwise_equal(results[i].out, r.out)) << "threads " << i + 1;
    EXPECT_TRUE(bitwise_equal(results[i].lse, r.lse)) << "threads " << i + 1;
    EXPECT_TRUE(bitwise_equal(results[i].dqkv, r.dqkv)) << "threads " << i + 1;
  }
}

TEST(KernelAttention, Bf16MatchesFp32) {
  expect_attention_matches_fp32<bf16>(0x1p-8);
}

TEST(KernelAttention, F16MatchesFp32) {
  expect_attention_matches_fp32<f16>(0x1p-11);
}

}  // namespace
}  // namespace mt::kernels
