// LoRA's adapter kernels against a double reference of PEFT's formula on a column range of a wider output:
// forward and every gradient, without and with dropout (whose mask the reference draws from the same
// counter-based bits), and dropout's mask: its keep rate and its repeat for the same draw only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/lora.h"
#include "core/rng.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::expect_close;
using testing::random_floats;
using testing::to_double;

// M rows, in -> width columns at `column` of a row of out_stride, rank 3.
constexpr LoraShape kShape{
    .M = 7, .in = 20, .rank = 3, .width = 9, .out_stride = 30, .column = 12, .scale = 2.5f};

struct Reference {
  std::vector<double> out, da, db, dinp;
};

// y = out + s * drop(x) A^T B^T on the columns; the gradients of sum(y * dout) as PEFT's autograd takes them.
Reference reference(const std::vector<float>& x, const std::vector<float>& a, const std::vector<float>& b,
                    const std::vector<float>& out, const std::vector<float>& dout, const DropoutMask& m) {
  const LoraShape& s = kShape;
  std::vector<double> xd(s.M * s.in), h(s.M * s.rank, 0.0), g(s.M * s.rank, 0.0);
  for (int64_t i = 0; i < s.M * s.in; ++i) {
    const bool keep =
        m.p <= 0 || random_uniform(m.seed, m.stream, m.first_sample * (s.M * s.in / m.samples) + i) >= m.p;
    xd[i] = keep ? x[i] / (1.0 - m.p) : 0.0;
  }
  Reference r{to_double(out), std::vector<double>(s.rank * s.in, 0.0),
              std::vector<double>(s.width * s.rank, 0.0), std::vector<double>(s.M * s.in, 0.0)};
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t k = 0; k < s.rank; ++k)
      for (int64_t j = 0; j < s.in; ++j) h[i * s.rank + k] += s.scale * xd[i * s.in + j] * a[k * s.in + j];
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t c = 0; c < s.width; ++c) {
      const int64_t o = i * s.out_stride + s.column + c;
      for (int64_t k = 0; k < s.rank; ++k) {
        r.out[o] += h[i * s.rank + k] * b[c * s.rank + k];
        r.db[c * s.rank + k] += dout[o] * h[i * s.rank + k];
        g[i * s.rank + k] += s.scale * dout[o] * b[c * s.rank + k];
      }
    }
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t k = 0; k < s.rank; ++k)
      for (int64_t j = 0; j < s.in; ++j) {
        r.da[k * s.in + j] += g[i * s.rank + k] * xd[i * s.in + j];
        const bool kept = xd[i * s.in + j] != 0.0 || m.p <= 0;
        r.dinp[i * s.in + j] += kept ? g[i * s.rank + k] * a[k * s.in + j] / (1.0 - m.p) : 0.0;
      }
  return r;
}

void check(const DropoutMask& mask) {
  const LoraShape& s = kShape;
  const auto x = random_floats(s.M * s.in, 1), a = random_floats(s.rank * s.in, 2),
             b = random_floats(s.width * s.rank, 3), out0 = random_floats(s.M * s.out_stride, 4),
             dout = random_floats(s.M * s.out_stride, 5), dinp0 = random_floats(s.M * s.in, 6);
  const Reference r = reference(x, a, b, out0, dout, mask);
  std::vector<float> out = out0, hidden(s.M * s.rank), dropped(s.M * s.in), grad_hidden(s.M * s.rank);
  lora_forward(out.data(), hidden.data(), x.data(), a.data(), b.data(), s, mask, dropped.data(), nullptr);
  expect_close(out, r.out, 1e-5, 1e-5);
  std::vector<float> da(s.rank * s.in, 0.0f), db(s.width * s.rank, 0.0f), dinp = dinp0;
  lora_backward(dinp.data(), da.data(), db.data(), grad_hidden.data(), dout.data(), x.data(), hidden.data(),
                a.data(), b.data(), s, mask, dropped.data(), nullptr);
  expect_close(da, r.da, 1e-5, 1e-5);
  expect_close(db, r.db, 1e-5, 1e-5);
  std::vector<double> dinp_expected = to_double(dinp0);
  for (size_t i = 0; i < dinp_expected.size(); ++i) dinp_expected[i] += r.dinp[i];  // added into, not set
  expect_close(dinp, dinp_expected, 1e-5, 1e-5);
}

TEST(KernelLora, ForwardAndGradientsOnAColumnRange) {
  check({});
}

TEST(KernelLora, DropoutForwardAndGradientsDrawTheSameMask) {
  check({.p = 0.3f, .seed = 7, .stream = 11, .first_sample = 5, .samples = 7});
}

TEST(KernelLora, DropoutKeepsOneMinusPAndChangesWithTheDraw) {
  const LoraShape s{.M = 64, .in = 256, .rank = 1, .width = 1, .out_stride = 1, .column = 0, .scale = 1.0f};
  const std::vector<float> x(s.M * s.in, 1.0f), a(s.in, 0.0f), b(1, 0.0f);
  std::vector<float> out(s.M), hidden(s.M), first(s.M * s.in), again(s.M * s.in), other(s.M * s.in);
  for (auto [first_sample, into] :
       {std::pair{3ull, &first}, std::pair{3ull, &again}, std::pair{4ull, &other}})
    lora_forward(out.data(), hidden.data(), x.data(), a.data(), b.data(), s,
                 {.p = 0.25f, .seed = 1, .stream = 2, .first_sample = first_sample, .samples = 4},
                 into->data(), nullptr);
  int64_t kept = 0;
  for (float v : first) {
    EXPECT_TRUE(v == 0.0f || v == 1.0f / 0.75f);
    kept += v != 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / first.size(), 0.75, 0.02);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

TEST(KernelLora, DropoutMasksFollowTheSamplesHoweverTheBatchIsSplit) {
  // Samples 8..11 as one micro-batch of 4, and as two of 2 (from samples 8 and 10): the same masks.
  const LoraShape whole{
      .M = 4 * 6, .in = 16, .rank = 1, .width = 1, .out_stride = 1, .column = 0, .scale = 1.0f};
  LoraShape half = whole;
  half.M = whole.M / 2;
  const std::vector<float> x(whole.M * whole.in, 1.0f), a(whole.in, 0.0f), b(1, 0.0f);
  std::vector<float> out(whole.M), hidden(whole.M), one(whole.M * whole.in), two(whole.M * whole.in);
  const DropoutMask mask{.p = 0.5f, .seed = 3, .stream = 9, .first_sample = 8, .samples = 4};
  lora_forward(out.data(), hidden.data(), x.data(), a.data(), b.data(), whole, mask, one.data(), nullptr);
  for (uint64_t part = 0; part < 2; ++part) {
    DropoutMask halves = mask;
    halves.first_sample = 8 + 2 * part;
    halves.samples = 2;
    lora_forward(out.data(), hidden.data(), x.data(), a.data(), b.data(), half, halves,
                 two.data() + part * half.M * half.in, nullptr);
  }
  EXPECT_EQ(one, two);
  EXPECT_NE(std::count(one.begin(), one.end(), 0.0f), 0);  // dropout did drop
}

}  // namespace
}  // namespace mt::kernels
