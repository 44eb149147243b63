#include <gtest/gtest.h>

#include <cmath>
#include <type_traits>

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

// Half a unit in the last place, relative: the rounding that storing in T adds to a fp32 result.
template <typename T>
constexpr double half_ulp() {
  return std::is_same_v<T, float> ? 0x1p-24 : std::is_same_v<T, bf16> ? 0x1p-8 : 0x1p-11;
}

struct LayerNormData {
  std::vector<float> x, w, b, dout, dx, dw, db;  // inputs, then the initial gradients that backward adds to
};

// Values representable in T (and initial parameter gradients representable in G), as fp32.
template <typename T, typename G>
LayerNormData representable_data(int64_t N, int64_t C) {
  auto in = [](std::vector<float> v) { return to_float(to_storage<T>(v)); };
  auto param_grad = [](std::vector<float> v) { return to_float(to_storage<G>(v)); };
  return {.x = in(random_floats(N * C, 1)),
          .w = in(random_floats(C, 2)),
          .b = in(random_floats(C, 3)),
          .dout = in(random_floats(N * C, 4)),
          .dx = in(random_floats(N * C, 5)),
          .dw = param_grad(random_floats(C, 6)),
          .db = param_grad(random_floats(C, 7))};
}

struct LayerNormResult {
  std::vector<float> y, mean, rstd, dx, dw, db;
};

// Forward and backward with activations stored in T and parameter gradients in G; results as fp32.
template <typename T, typename G>
LayerNormResult run_layernorm(const LayerNormData& d, int64_t N, int64_t C) {
  const auto x = to_storage<T>(d.x), w = to_storage<T>(d.w), b = to_storage<T>(d.b);
  const auto dout = to_storage<T>(d.dout);
  std::vector<T> y(N * C), dx = to_storage<T>(d.dx);
  std::vector<G> dw = to_storage<G>(d.dw), db = to_storage<G>(d.db);
  std::vector<float> mean(N), rstd(N);
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, kEps);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  return {to_float(y), mean, rstd, to_float(dx), to_float(dw), to_float(db)};
}

// The T/G kernels compute in fp32 like the fp32 kernel, on the same values, so each stored result is the
// fp32 one rounded once: within half an ulp of T (or G), plus a little for sums that the two vectorize
// differently (without FMA, or in other vector widths). The statistics stay fp32. 1, 2 and 3 threads must
// give the same bits.
template <typename T, typename G>
void expect_layernorm_matches_fp32() {
  const int64_t N = 301, C = 136;  // C leaves a partial column block
  const LayerNormData data = representable_data<T, G>(N, C);
  const LayerNormResult ref = run_layernorm<float, float>(data, N, C);
  std::vector<LayerNormResult> results;
  for (int threads : {1, 2, 3})
    with_threads(threads, [&] { results.push_back(run_layernorm<T, G>(data, N, C)); });
  const LayerNormResult& r = results[0];
  expect_close(r.y, to_double(ref.y), half_ulp<T>(), 1e-6);
  expect_close(r.mean, to_double(ref.mean), 1e-6, 1e-6);
  expect_close(r.rstd, to_double(ref.rstd), 1e-6, 1e-6);
  expect_close(r.dx, to_double(ref.dx), half_ulp<T>(), 1e-5);
  // dw and db sum N terms of about 1, so fp32 differences in the statistics can add up to ~1e-5.
  expect_close(r.dw, to_double(ref.dw), half_ulp<G>() + 1e-6, 1e-4);
  expect_close(r.db, to_double(ref.db), half_ulp<G>() + 1e-6, 1e-4);
  for (int i : {1, 2}) {
    for (auto field : {&LayerNormResult::y, &LayerNormResult::mean, &LayerNormResult::rstd,
                       &LayerNormResult::dx, &LayerNormResult::dw, &LayerNormResult::db}) {
      EXPECT_TRUE(bitwise_equal(results[i].*field, r.*field)) << "threads " << i + 1;
    }
  }
}

TEST(KernelLayerNorm, Bf16MatchesFp32) {
  expect_layernorm_matches_fp32<bf16, float>();
}

TEST(KernelLayerNorm, Bf16WithBf16GradientsMatchesFp32) {
  expect_layernorm_matches_fp32<bf16, bf16>();
}

TEST(KernelLayerNorm, F16MatchesFp32) {
  expect_layernorm_matches_fp32<f16, float>();
}

}  // namespace
}  // namespace mt::kernels
