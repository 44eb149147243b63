#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>

#include "backend/cpu/attention.h"
#include "backend/cpu/attention_tiles.h"
#include "kernels_test_util.h"

// A namespace of its own: a unity build puts this file in one translation unit with other kernel tests,
// which name their shapes B, T, C, NH and hs and their reference Reference too; it also keeps the
// using-directive below to this file.
namespace mt::kernels::attention_test {
namespace {

// The tile helpers as the generic level builds them; the kernels at the level the test runs at.
using namespace MT_ISA;

using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::to_double;
using testing::to_float;
using testing::to_storage;
using testing::with_threads;

// The fp32 tests' shape: one block of queries, hs not a multiple of the vector width.
constexpr int64_t B = 2, T = 37, C = 120, NH = 5, hs = C / NH, C3 = 3 * C;

// NKV key/value heads shared by NH query heads (NKV = NH: multi-head attention).
struct Shape {
  int64_t B, T, C, NH, NKV;
  int64_t hs() const { return C / NH; }
  int64_t row() const { return C + 2 * NKV * hs(); }
  int64_t kv_head(int64_t h) const { return h / (NH / NKV); }
  int64_t qkv_size() const { return B * T * row(); }
  int64_t out_size() const { return B * T * C; }
  int64_t lse_size() const { return B * NH * T; }
};

constexpr Shape kShape{B, T, C, NH, NH};
// Grouped-query attention: 3 query heads per key/value head.
constexpr Shape kGroupedShape{B, T, C, 6, 2};

// Naive causal attention in double: the full probability matrix of every (b, h).
struct Reference {
  Shape sh;
  std::vector<double> out, lse, probs;  // probs[b,h,t,s]
  std::vector<double> out_mag;          // sum_s p_ts |v_s|: what rounding the probabilities can move out by

  Reference(const std::vector<double>& qkv, Shape shape = kShape)
      : sh(shape),
        out(sh.out_size()),
        lse(sh.lse_size()),
        probs(sh.lse_size() * sh.T),
        out_mag(sh.out_size()) {
    const int64_t T = sh.T, NH = sh.NH, hs = sh.hs(), C = sh.C;
    const double scale = 1 / std::sqrt(double(hs));
    for (int64_t b = 0; b < sh.B; ++b) {
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
            double o = 0, mag = 0;
            for (int64_t s = 0; s <= t; ++s) {
              o += p[s] * v(qkv, b, s, h, i);
              mag += p[s] * std::abs(v(qkv, b, s, h, i));
            }
            out[(b * T + t) * C + h * hs + i] = o;
            out_mag[(b * T + t) * C + h * hs + i] = mag;
          }
        }
      }
    }
  }

  // Element i of query head h (part 0), or of the key (1) or value (2) head that h reads.
  int64_t at(int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) const {
    const int64_t head = part == 0 ? h : (part - 1) * sh.NKV + sh.kv_head(h);
    return (b * sh.T + t) * sh.row() + (part == 0 ? 0 : sh.C) + head * sh.hs() + i;
  }
  double q(const std::vector<double>& x, int64_t b, int64_t t, int64_t h, int64_t i) const {
    return x[at(b, t, 0, h, i)];
  }
  double k(const std::vector<double>& x, int64_t b, int64_t t, int64_t h, int64_t i) const {
    return x[at(b, t, 1, h, i)];
  }
  double v(const std::vector<double>& x, int64_t b, int64_t t, int64_t h, int64_t i) const {
    return x[at(b, t, 2, h, i)];
  }

  struct Gradient {
    std::vector<double> dqkv;
    // Per element of dqkv, the sum of |term| over the products' terms that round a probability (dv) or a
    // score gradient (dq, dk) to the operand type: how far that rounding can move it.
    std::vector<double> mag;
  };

  // The analytic gradient of sum(out * dout) with respect to qkv.
  Gradient backward(const std::vector<double>& qkv, const std::vector<float>& dout) const {
    const int64_t T = sh.T, NH = sh.NH, hs = sh.hs(), C = sh.C;
    const double scale = 1 / std::sqrt(double(hs));
    Gradient g{std::vector<double>(sh.qkv_size()), std::vector<double>(sh.qkv_size())};
    for (int64_t b = 0; b < sh.B; ++b) {
      for (int64_t h = 0; h < NH; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          const double* p = &probs[((b * NH + h) * T + t) * T];
          const float* dy = &dout[(b * T + t) * C + h * hs];
          std::vector<double> dp(t + 1);
          double pdp = 0;
          for (int64_t s = 0; s <= t; ++s) {
            for (int64_t i = 0; i < hs; ++i) {
              dp[s] += dy[i] * v(qkv, b, s, h, i);
              g.dqkv[at(b, s, 2, h, i)] += p[s] * dy[i];
              g.mag[at(b, s, 2, h, i)] += p[s] * std::abs(dy[i]);
            }
            pdp += p[s] * dp[s];
          }
          for (int64_t s = 0; s <= t; ++s) {
            const double ds = p[s] * (dp[s] - pdp) * scale;
            for (int64_t i = 0; i < hs; ++i) {
              g.dqkv[at(b, t, 0, h, i)] += ds * k(qkv, b, s, h, i);
              g.dqkv[at(b, s, 1, h, i)] += ds * q(qkv, b, t, h, i);
              g.mag[at(b, t, 0, h, i)] += std::abs(ds * k(qkv, b, s, h, i));
              g.mag[at(b, s, 1, h, i)] += std::abs(ds * q(qkv, b, t, h, i));
            }
          }
        }
      }
    }
    return g;
  }
};

std::vector<float> scratch_for_threads() {
  return std::vector<float>(attention_scratch_floats(T, hs, omp_get_max_threads(), DType::f32));
}

TEST(KernelAttention, ForwardMatchesNaive) {
  const auto qkv = random_floats(B * T * C3, 1, 2.0);  // large enough that the softmax is far from flat
  const Reference ref(to_double(qkv));
  std::vector<float> out(B * T * C), lse(B * NH * T), scratch = scratch_for_threads();
  attention_forward(out.data(), lse.data(), qkv.data(), nullptr, B, T, C, NH, NH, scratch.data());
  expect_close(out, ref.out, 1e-5, 1e-5);
  expect_close(lse, ref.lse, 1e-5, 1e-5);
}

TEST(KernelAttention, BackwardMatchesAnalyticGradient) {
  const auto qkv = random_floats(B * T * C3, 1, 2.0), dout = random_floats(B * T * C, 2);
  const Reference ref(to_double(qkv));
  std::vector<float> out(B * T * C), lse(B * NH * T), scratch = scratch_for_threads();
  std::vector<float> dqkv(B * T * C3, 123.0f);  // overwritten, not accumulated
  attention_forward(out.data(), lse.data(), qkv.data(), nullptr, B, T, C, NH, NH, scratch.data());
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, B, T, C, NH, NH,
                     scratch.data());
  expect_close(dqkv, ref.backward(to_double(qkv), dout).dqkv, 1e-4, 1e-4);
}

// Grouped-query attention: each key/value head serves its group's query heads, and their gradients sum.
TEST(KernelAttention, GroupedQueriesMatchNaive) {
  const Shape& sh = kGroupedShape;
  const auto qkv = random_floats(sh.qkv_size(), 1, 2.0), dout = random_floats(sh.out_size(), 2);
  const Reference ref(to_double(qkv), sh);
  std::vector<float> out(sh.out_size()), lse(sh.lse_size()), dqkv(sh.qkv_size(), 123.0f);
  std::vector<float> scratch = scratch_for_threads();
  attention_forward(out.data(), lse.data(), qkv.data(), nullptr, sh.B, sh.T, sh.C, sh.NH, sh.NKV,
                    scratch.data());
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, sh.B, sh.T, sh.C,
                     sh.NH, sh.NKV, scratch.data());
  expect_close(out, ref.out, 1e-5, 1e-5);
  expect_close(lse, ref.lse, 1e-5, 1e-5);
  expect_close(dqkv, ref.backward(to_double(qkv), dout).dqkv, 1e-4, 1e-4);
}

TEST(KernelAttention, ReferenceGradientMatchesFiniteDifferences) {
  const auto qkv = random_floats(B * T * C3, 1, 2.0), dout = random_floats(B * T * C, 2);
  std::vector<double> x = to_double(qkv);
  const auto analytic = Reference(x).backward(x, dout).dqkv;
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
      attention_forward(out.data(), lse.data(), qkv.data(), nullptr, B, T, C, NH, NH, scratch.data());
      attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, B, T, C, NH,
                         NH, scratch.data());
      results.push_back(dqkv);
    });
  }
  EXPECT_TRUE(bitwise_equal(results[0], results[1]));
  EXPECT_TRUE(bitwise_equal(results[0], results[2]));
}

struct AttentionResult {
  std::vector<float> out, lse, dqkv;
};

// Scratch full of NaN: in a model it holds what earlier ops left, which must not reach any result.
std::vector<float> scratch_for(const Shape& sh, DType dtype) {
  return std::vector<float>(attention_scratch_floats(sh.T, sh.hs(), omp_get_max_threads(), dtype), NAN);
}

// Forward, then backward from the stored out, with storage type X; results as fp32.
template <typename X>
AttentionResult run_attention(const Shape& sh, const std::vector<float>& qkv,
                              const std::vector<float>& dout) {
  const auto qkv_x = to_storage<X>(qkv), dout_x = to_storage<X>(dout);
  std::vector<X> out(sh.out_size()), dqkv(sh.qkv_size(), round_to<X>(123.0f));  // dqkv is overwritten
  std::vector<float> lse(sh.lse_size()), scratch = scratch_for(sh, dtype_of<X>());
  attention_forward(out.data(), lse.data(), qkv_x.data(), nullptr, sh.B, sh.T, sh.C, sh.NH, sh.NKV,
                    scratch.data());
  attention_backward(dqkv.data(), dout_x.data(), qkv_x.data(), out.data(), lse.data(), nullptr, sh.B, sh.T,
                     sh.C, sh.NH, sh.NKV, scratch.data());
  return {to_float(out), lse, to_float(dqkv)};
}

// |actual - expected| <= rtol * |expected| + mtol * mag + atol, element by element.
void expect_within(const std::vector<float>& actual, const std::vector<double>& expected,
                   const std::vector<double>& mag, double rtol, double mtol, double atol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], rtol * std::abs(expected[i]) + mtol * mag[i] + atol)
        << "at index " << i;
  }
}

// The 16-bit kernels against the fp32 kernel on the same rounded inputs. Each stored value may differ by the
// rounding of its own result (half an ulp of X: store_ulp, relative) and by that of the products' operands
// (operand_ulp, relative to the reference's sum of |terms|; bf16 rounds the probabilities and score
// gradients, f16 keeps them fp32). The fp32 backward gets the 16-bit forward's out and lse (their rounding
// is part of its input). 1, 2 and 3 threads must give the same bits.
template <typename X>
void expect_attention_matches_fp32(const Shape& sh, double store_ulp, double operand_ulp) {
  const auto qkv = to_float(to_storage<X>(random_floats(sh.qkv_size(), 1, 2.0)));
  const auto dout = to_float(to_storage<X>(random_floats(sh.out_size(), 2)));
  std::vector<AttentionResult> results;
  for (int threads : {1, 2, 3})
    with_threads(threads, [&] { results.push_back(run_attention<X>(sh, qkv, dout)); });
  const AttentionResult& r = results[0];

  const AttentionResult ref = run_attention<float>(sh, qkv, dout);
  std::vector<float> ref_dqkv(sh.qkv_size()), scratch = scratch_for(sh, DType::f32);
  attention_backward(ref_dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), nullptr, sh.B,
                     sh.T, sh.C, sh.NH, sh.NKV, scratch.data());
  const Reference exact(to_double(qkv), sh);
  expect_within(r.out, to_double(ref.out), exact.out_mag, store_ulp, operand_ulp, 1e-6);
  expect_close(r.lse, to_double(ref.lse), 1e-6, 1e-5);
  expect_within(r.dqkv, to_double(ref_dqkv), exact.backward(to_double(qkv), dout).mag, store_ulp, operand_ulp,
                1e-5);
  for (int i : {1, 2}) {
    EXPECT_TRUE(bitwise_equal(results[i].out, r.out)) << "threads " << i + 1;
    EXPECT_TRUE(bitwise_equal(results[i].lse, r.lse)) << "threads " << i + 1;
    EXPECT_TRUE(bitwise_equal(results[i].dqkv, r.dqkv)) << "threads " << i + 1;
  }
}

// The 16-bit kernels work on blocks of 64 queries: one block; several with a short last one (hs = 64, as
// GPT-2); an odd number of queries in the last block with an odd hs; a single position; grouped queries over
// several blocks.
const Shape kShapes16[] = {
    kShape, {1, 150, 128, 2, 2}, {1, 67, 21, 3, 3}, {2, 1, 120, 5, 5}, {2, 70, 128, 4, 2}, kGroupedShape};

TEST(KernelAttention, Bf16MatchesFp32) {
  for (const Shape& sh : kShapes16) {
    SCOPED_TRACE(::testing::Message() << "T " << sh.T << " hs " << sh.hs());
    expect_attention_matches_fp32<bf16>(sh, 0x1p-8, 0x1p-8);
  }
}

TEST(KernelAttention, F16MatchesFp32) {
  for (const Shape& sh : kShapes16) {
    SCOPED_TRACE(::testing::Message() << "T " << sh.T << " hs " << sh.hs());
    expect_attention_matches_fp32<f16>(sh, 0x1p-11, 1e-6);
  }
}

// The conversion instructions that pack P and dS into bf16 lanes give the bits of bf16_operand_bits (round
// to nearest even, NaN quieted, subnormals to signed zero), in whole vectors and the remainder alike.
TEST(KernelAttention, Bf16LanesMatchOperandRounding) {
  std::vector<float> x = random_floats(70, 3);
  const float specials[] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -0x1p-130f, 0x1p-149f,
                            INFINITY,       -INFINITY,      NAN,        std::bit_cast<float>(0x7f800001u),
                            3.0e38f,        -0.0f};
  std::copy(std::begin(specials), std::end(specials), x.begin() + 3);
  std::copy(std::begin(specials), std::end(specials), x.begin() + 41);
  std::vector<uint32_t> along(35), across(35), alone(35);
  bf16_lanes_along(along.data(), x.data(), 70);
  bf16_lanes_across(across.data(), x.data(), x.data() + 35, 35);
  bf16_lanes_across(alone.data(), x.data(), nullptr, 35);
  for (int64_t j = 0; j < 35; ++j) {
    EXPECT_EQ(along[j], bf16_operand_bits(x[2 * j]) | bf16_operand_bits(x[2 * j + 1]) << 16) << j;
    EXPECT_EQ(across[j], bf16_operand_bits(x[j]) | bf16_operand_bits(x[35 + j]) << 16) << j;
    EXPECT_EQ(alone[j], bf16_operand_bits(x[j])) << j;
  }
  EXPECT_EQ(bf16_operand_bits(-0x1p-130f), 0x8000u);
  EXPECT_EQ(bf16_operand_bits(1.0f + 0x1p-8f), 0x3f80u);  // a tie, to even
  EXPECT_EQ(bf16_operand_bits(1.0f + 0x3p-8f), 0x3f82u);
}

}  // namespace
}  // namespace mt::kernels::attention_test
