#include <gtest/gtest.h>

#include "kernels/embedding.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::to_double;
using testing::with_threads;

constexpr int64_t B = 2, T = 37, C = 120, V = 11;  // a small vocabulary, so tokens repeat often

std::vector<int32_t> tokens() {
  std::vector<int32_t> t(B * T);
  for (int64_t i = 0; i < B * T; ++i) t[i] = static_cast<int32_t>(random_below(5, 0, i, V));
  return t;
}

TEST(KernelEmbedding, Forward) {
  const auto tok = tokens();
  const auto wte = random_floats(V * C, 1), wpe = random_floats(T * C, 2);
  std::vector<float> out(B * T * C);
  embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  std::vector<double> expected(B * T * C);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < C; ++j) {
        expected[(b * T + t) * C + j] =
            wte[tok[b * T + t] * C + j] + wpe[t * C + j];  // one float add: exact match
      }
    }
  }
  expect_close(out, expected, 0, 0);
}

TEST(KernelEmbedding, BackwardSumsRepeatedTokens) {
  const auto tok = tokens();
  const auto dout = random_floats(B * T * C, 3);
  const auto dwte0 = random_floats(V * C, 4), dwpe0 = random_floats(T * C, 5);
  std::vector<double> dwte_ref = to_double(dwte0), dwpe_ref = to_double(dwpe0);
  for (int64_t bt = 0; bt < B * T; ++bt) {
    for (int64_t j = 0; j < C; ++j) {
      dwte_ref[tok[bt] * C + j] += dout[bt * C + j];
      dwpe_ref[(bt % T) * C + j] += dout[bt * C + j];
    }
  }
  std::vector<float> dwte = dwte0, dwpe = dwpe0;
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
  expect_close(dwte, dwte_ref, 1e-5, 1e-5);
  expect_close(dwpe, dwpe_ref, 1e-6, 1e-6);
}

TEST(KernelEmbedding, BackwardSameBitsForAnyThreadCount) {
  const auto tok = tokens();
  const auto dout = random_floats(B * T * C, 3);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    with_threads(threads, [&] {
      std::vector<float> dwte(V * C), dwpe(T * C);
      embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
      dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
      results.push_back(dwte);
    });
  }
  EXPECT_TRUE(bitwise_equal(results[0], results[1]));
  EXPECT_TRUE(bitwise_equal(results[0], results[2]));
}

}  // namespace
}  // namespace mt::kernels
