#include <gtest/gtest.h>

#include "backend/cpu/embedding.h"
#include "kernels_test_util.h"

// A namespace of its own: a unity build puts this file in one translation unit with other kernel tests,
// which name their shapes B, T and C too.
namespace mt::kernels::embedding_test {
namespace {

using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::to_double;
using testing::to_float;
using testing::to_storage;
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
  embedding_forward(out.data(), tok.data(), nullptr, wte.data(), wpe.data(), B, T, C);
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
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), nullptr, B, T, C);
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
      embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), nullptr, B, T, C);
      dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
      results.push_back(dwte);
    });
  }
  EXPECT_TRUE(bitwise_equal(results[0], results[1]));
  EXPECT_TRUE(bitwise_equal(results[0], results[2]));
}

struct EmbeddingResult {
  std::vector<float> out, dwte, dwpe;
};

// Forward and backward with weights and activations stored in X and gradients in G; results as fp32.
template <typename X, typename G>
EmbeddingResult run_embedding(const std::vector<float>& wte, const std::vector<float>& wpe,
                              const std::vector<float>& dout, const std::vector<float>& dwte0,
                              const std::vector<float>& dwpe0) {
  const auto tok = tokens();
  const auto wte_x = to_storage<X>(wte), wpe_x = to_storage<X>(wpe), dout_x = to_storage<X>(dout);
  std::vector<X> out(B * T * C);
  auto dwte = to_storage<G>(dwte0), dwpe = to_storage<G>(dwpe0);
  embedding_forward(out.data(), tok.data(), nullptr, wte_x.data(), wpe_x.data(), B, T, C);
  embedding_backward(dwte.data(), dwpe.data(), dout_x.data(), tok.data(), nullptr, B, T, C);
  return {to_float(out), to_float(dwte), to_float(dwpe)};
}

// On values representable in X (and initial gradients representable in G), the forward is the fp32 sum
// rounded once, and so is the backward, which sums in fp32 in the fp32 kernel's order starting from the
// stored gradient: both equal the fp32 kernel's results rounded to their storage types, bit for bit. 1, 2
// and 3 threads must give the same bits.
template <typename X, typename G>
void expect_embedding_matches_fp32() {
  const auto wte = to_float(to_storage<X>(random_floats(V * C, 1)));
  const auto wpe = to_float(to_storage<X>(random_floats(T * C, 2)));
  const auto dout = to_float(to_storage<X>(random_floats(B * T * C, 3)));
  const auto dwte0 = to_float(to_storage<G>(random_floats(V * C, 4)));
  const auto dwpe0 = to_float(to_storage<G>(random_floats(T * C, 5)));
  const EmbeddingResult ref = run_embedding<float, float>(wte, wpe, dout, dwte0, dwpe0);
  std::vector<EmbeddingResult> results;
  for (int threads : {1, 2, 3}) {
    with_threads(threads, [&] { results.push_back(run_embedding<X, G>(wte, wpe, dout, dwte0, dwpe0)); });
  }
  const EmbeddingResult& r = results[0];
  EXPECT_TRUE(bitwise_equal(r.out, to_float(to_storage<X>(ref.out))));
  EXPECT_TRUE(bitwise_equal(r.dwte, to_float(to_storage<G>(ref.dwte))));
  EXPECT_TRUE(bitwise_equal(r.dwpe, to_float(to_storage<G>(ref.dwpe))));
  for (int i : {1, 2}) {
    EXPECT_TRUE(bitwise_equal(results[i].out, r.out)) << "threads " << i + 1;
    EXPECT_TRUE(bitwise_equal(results[i].dwte, r.dwte)) << "threads " << i + 1;
    EXPECT_TRUE(bitwise_equal(results[i].dwpe, r.dwpe)) << "threads " << i + 1;
  }
}

TEST(KernelEmbedding, Bf16MatchesFp32) {
  expect_embedding_matches_fp32<bf16, float>();
}

TEST(KernelEmbedding, Bf16WithBf16GradientsMatchesFp32) {
  expect_embedding_matches_fp32<bf16, bf16>();
}

TEST(KernelEmbedding, F16MatchesFp32) {
  expect_embedding_matches_fp32<f16, float>();
}

// A bf16 gradient of 1 cannot take a 2^-8 step (1 + 2^-8 ties back to 1), so adding a token's rows to it
// one at a time would lose them all; the fp32 sum keeps them. Both expected sums are exact in bf16.
TEST(KernelEmbedding, Bf16GradientsKeepSmallContributions) {
  const std::vector<int32_t> tok(B * T, 3);  // one token everywhere
  const std::vector<bf16> dout(B * T * C, round_to<bf16>(0x1p-8f));
  std::vector<bf16> dwte(V * C, round_to<bf16>(1.0f)), dwpe(T * C, round_to<bf16>(1.0f));
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), nullptr, B, T, C);
  for (int64_t j = 0; j < C; ++j) {
    ASSERT_EQ(to_f32(dwte[3 * C + j]), 1.0f + B * T * 0x1p-8f) << "column " << j;
    ASSERT_EQ(to_f32(dwte[2 * C + j]), 1.0f);  // a token that does not occur is left alone
  }
  for (int64_t i = 0; i < T * C; ++i) ASSERT_EQ(to_f32(dwpe[i]), 1.0f + B * 0x1p-8f) << "at " << i;
}

}  // namespace
}  // namespace mt::kernels::embedding_test
