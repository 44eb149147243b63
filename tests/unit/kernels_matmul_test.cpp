#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "backend/cpu/matmul.h"
#include "backend/cpu/onednn_matmul.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::to_double;
using testing::with_threads;

constexpr GemmBackend kBackends[] = {GemmBackend::onednn, GemmBackend::openblas};

// Selects a backend for one test and puts the build's default back afterwards.
class BackendScope {
 public:
  explicit BackendScope(GemmBackend backend) : saved_(gemm_backend()) { set_gemm_backend(backend); }
  ~BackendScope() { set_gemm_backend(saved_); }

 private:
  GemmBackend saved_;
};

// Element (r, c) of op(X) for a row-major X with row stride ld.
double op_at(const std::vector<float>& X, bool trans, int64_t ld, int64_t r, int64_t c) {
  return trans ? X[c * ld + r] : X[r * ld + c];
}

// n values from N(0, 1), rounded to T: every later conversion of them to fp32 is exact.
template <typename T>
std::vector<T> random_values(int64_t n, uint64_t stream) {
  const std::vector<float> x = random_floats(n, stream);
  std::vector<T> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = round_to<T>(x[i]);
  return y;
}

template <typename T>
std::vector<float> to_floats(const std::vector<T>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = to_f32(x[i]);
  return y;
}

// Unit roundoff of storing a value as T (none for fp32).
template <typename T>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<T, bf16>) return 0x1p-8;
  if constexpr (std::is_same_v<T, f16>) return 0x1p-11;
  return 0.0;
}

// Every element within one rounding into Out of the expected value, plus fp32 accumulation error relative to
// the sum of the terms' magnitudes.
template <typename Out>
void expect_rounded_close(const std::vector<Out>& actual, const std::vector<double>& expected,
                          const std::vector<double>& magnitude) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const double tol = unit_roundoff<Out>() * std::abs(expected[i]) + 1e-5 * magnitude[i] + 1e-6;
    ASSERT_NEAR(to_f32(actual[i]), expected[i], tol) << "at index " << i;
  }
}

TEST(KernelMatmul, BackendNames) {
  EXPECT_EQ(gemm_backend_name(GemmBackend::onednn), "onednn");
  EXPECT_EQ(gemm_backend_name(GemmBackend::openblas), "openblas");
  for (GemmBackend backend : kBackends) {
    BackendScope scope(backend);
    EXPECT_EQ(gemm_backend(), backend);
  }
}

TEST(KernelMatmul, GemmAllTransposesBothBackends) {
  const int64_t M = 37, N = 29, K = 45, pad = 3;  // padded leading dimensions catch stride mix-ups
  const float beta = -0.5f;
  for (GemmBackend backend : kBackends) {
    BackendScope scope(backend);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(std::string(gemm_backend_name(backend)) + " ta=" + std::to_string(ta) +
                     " tb=" + std::to_string(tb));
        const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        const auto A = random_floats((ta ? K : M) * lda, 1), B = random_floats((tb ? N : K) * ldb, 2);
        auto C = random_floats(M * ldc, 3);
        std::vector<double> expected = to_double(C);
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t j = 0; j < N; ++j) {
            double sum = 0;
            for (int64_t k = 0; k < K; ++k) sum += op_at(A, ta, lda, i, k) * op_at(B, tb, ldb, k, j);
            expected[i * ldc + j] = sum + beta * expected[i * ldc + j];
          }
        }
        gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, nullptr);
        expect_close(C, expected, 1e-5, 1e-5);
      }
    }
  }
}

// gemm<In, Out> on values rounded to In (and a C rounded to Out) against a double reference, for every
// transpose, beta 0 and 1, and padded leading dimensions.
template <typename In, typename Out>
void check_gemm_16bit(int64_t M, int64_t N, int64_t K) {
  const int64_t pad = 3;
  std::vector<float> scratch(gemm_scratch_floats(dtype_of<In>(), cpu_isa(), omp_get_max_threads()));
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 1.0f}) {
        SCOPED_TRACE("ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                     " beta=" + std::to_string(beta));
        const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        const auto A = random_values<In>((ta ? K : M) * lda, 1), B = random_values<In>((tb ? N : K) * ldb, 2);
        auto C = random_values<Out>(M * ldc, 3);
        const auto A_f = to_floats(A), B_f = to_floats(B), C_f = to_floats(C);
        std::vector<double> expected(M * ldc), magnitude(M * ldc);
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t j = 0; j < N; ++j) {
            double sum = beta * C_f[i * ldc + j], abs_sum = std::abs(sum);
            for (int64_t k = 0; k < K; ++k) {
              const double term = op_at(A_f, ta, lda, i, k) * op_at(B_f, tb, ldb, k, j);
              sum += term;
              abs_sum += std::abs(term);
            }
            expected[i * ldc + j] = sum;
            magnitude[i * ldc + j] = abs_sum;
          }
        }
        // The padding must come through untouched.
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t j = N; j < ldc; ++j) expected[i * ldc + j] = C_f[i * ldc + j];
        }
        gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, scratch.data());
        expect_rounded_close(C, expected, magnitude);
      }
    }
  }
}

// M, N cross the f16 tile edges, K is below one tile; then K spans several tiles with a partial last one.
TEST(KernelMatmul, GemmBf16) {
  check_gemm_16bit<bf16, float>(300, 513, 37);
  check_gemm_16bit<bf16, bf16>(300, 513, 37);
  check_gemm_16bit<bf16, float>(70, 260, 600);
  check_gemm_16bit<bf16, bf16>(70, 260, 600);
}

TEST(KernelMatmul, GemmF16) {
  check_gemm_16bit<f16, float>(300, 513, 37);
  check_gemm_16bit<f16, f16>(300, 513, 37);
  check_gemm_16bit<f16, float>(70, 260, 600);
  check_gemm_16bit<f16, f16>(70, 260, 600);
}

TEST(KernelMatmul, GemmScratchByLevel) {
  for (CpuIsa isa : {CpuIsa::generic, CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16}) {
    SCOPED_TRACE(std::string(cpu_isa_name(isa)));
    EXPECT_EQ(gemm_scratch_floats(DType::f32, isa, 2), 0);
    EXPECT_GT(gemm_scratch_floats(DType::f16, isa, 2), 0);
    // bf16 goes through fp32 tiles exactly where the CPU has no bf16 dot-product instructions.
    EXPECT_EQ(gemm_scratch_floats(DType::bf16, isa, 2) > 0, isa < CpuIsa::avx512_bf16);
  }
}

// Each thread multiplies whole tiles in a fixed order: the bits do not depend on how many there are.
TEST(KernelMatmul, TiledProductsSameBitsForAnyThreadCount) {
  const int64_t M = 300, N = 600, K = 700;
  const std::vector<f16> a = random_values<f16>(M * K, 1), b = random_values<f16>(K * N, 2);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    with_threads(threads, [&] {
      std::vector<float> scratch(gemm_scratch_floats(DType::f16, cpu_isa(), threads));
      std::vector<f16> c(M * N);
      gemm(false, true, M, N, K, a.data(), K, b.data(), K, 0.0f, c.data(), N, scratch.data());
      results.push_back(testing::to_float(c));
    });
  }
  EXPECT_TRUE(bitwise_equal(results[0], results[1]));
  EXPECT_TRUE(bitwise_equal(results[0], results[2]));
}

TEST(KernelMatmul, Gemm16BitRejectsOtherBeta) {
  const std::vector<bf16> a(4);
  std::vector<float> c(4);
  EXPECT_THROW(gemm(false, false, 2, 2, 2, a.data(), 2, a.data(), 2, 0.5f, c.data(), 2, nullptr),
               std::invalid_argument);
  const std::vector<f16> h(4);
  std::vector<float> scratch(gemm_scratch_floats(DType::f16, cpu_isa(), omp_get_max_threads()));
  EXPECT_THROW(gemm(false, false, 2, 2, 2, h.data(), 2, h.data(), 2, -1.0f, c.data(), 2, scratch.data()),
               std::invalid_argument);
}

// A primitive is created once per product and thread count, then reused.
TEST(KernelMatmul, OnednnPrimitivesAreCached) {
  if (!native_bf16_gemm(cpu_isa())) GTEST_SKIP() << "bf16 products go through fp32 tiles at this level";
  const int64_t n = 24;
  const std::vector<bf16> a = random_values<bf16>(n * n, 1);
  std::vector<float> c(n * n);
  const auto run = [&] {
    gemm(false, false, n, n, n - 1, a.data(), n, a.data(), n, 0.0f, c.data(), n, nullptr);
  };
  run();
  const int64_t cached = onednn_matmul_cache_size();
  run();
  EXPECT_EQ(onednn_matmul_cache_size(), cached);
  with_threads(omp_get_max_threads() + 1, run);
  EXPECT_EQ(onednn_matmul_cache_size(), cached + 1);
}

// out[M,n_out] = inp @ W + bias (+ out0 when accumulating), in double.
std::vector<double> linear_reference(const std::vector<float>& inp, const std::vector<float>& W,
                                     const std::vector<float>* bias, const std::vector<float>* out0,
                                     int64_t M, int64_t n_in, int64_t n_out) {
  std::vector<double> out(M * n_out);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < n_out; ++j) {
      double sum = bias ? (*bias)[j] : 0.0;
      if (out0) sum += (*out0)[i * n_out + j];
      for (int64_t k = 0; k < n_in; ++k) sum += static_cast<double>(inp[i * n_in + k]) * W[k * n_out + j];
      out[i * n_out + j] = sum;
    }
  }
  return out;
}

TEST(KernelMatmul, LinearForward) {
  const int64_t M = 23, n_in = 40, n_out = 67;
  const auto inp = random_floats(M * n_in, 1), W = random_floats(n_in * n_out, 2),
             bias = random_floats(n_out, 3);
  const auto residual = random_floats(M * n_out, 4);
  for (GemmBackend backend : kBackends) {
    BackendScope scope(backend);
    std::vector<float> out(M * n_out, 123.0f);  // overwritten without accumulate
    linear_forward<float>(out.data(), inp.data(), W.data(), bias.data(), M, n_in, n_out, false, nullptr);
    expect_close(out, linear_reference(inp, W, &bias, nullptr, M, n_in, n_out), 1e-5, 1e-5);

    out.assign(M * n_out, 123.0f);
    linear_forward<float>(out.data(), inp.data(), W.data(), nullptr, M, n_in, n_out, false, nullptr);
    expect_close(out, linear_reference(inp, W, nullptr, nullptr, M, n_in, n_out), 1e-5, 1e-5);

    out = residual;
    linear_forward<float>(out.data(), inp.data(), W.data(), bias.data(), M, n_in, n_out, true, nullptr);
    expect_close(out, linear_reference(inp, W, &bias, &residual, M, n_in, n_out), 1e-5, 1e-5);

    out = residual;
    linear_forward<float>(out.data(), inp.data(), W.data(), nullptr, M, n_in, n_out, true, nullptr);
    expect_close(out, linear_reference(inp, W, nullptr, &residual, M, n_in, n_out), 1e-5, 1e-5);
  }
}

TEST(KernelMatmul, LinearBackward) {
  const int64_t M = 31, n_in = 40, n_out = 75;
  const auto inp = random_floats(M * n_in, 1), W = random_floats(n_in * n_out, 2);
  const auto dout = random_floats(M * n_out, 3);
  const auto dinp0 = random_floats(M * n_in, 4), dW0 = random_floats(n_in * n_out, 5);
  const auto db0 = random_floats(n_out, 6);
  // The gradients of sum(out * dout), in double; the parameter gradients add to what was there.
  std::vector<double> dinp_ref(M * n_in), dW_ref = to_double(dW0), db_ref = to_double(db0);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < n_out; ++j) {
      const double g = dout[i * n_out + j];
      db_ref[j] += g;
      for (int64_t k = 0; k < n_in; ++k) {
        dinp_ref[i * n_in + k] += g * W[k * n_out + j];
        dW_ref[k * n_out + j] += g * inp[i * n_in + k];
      }
    }
  }
  std::vector<double> dinp_acc_ref = dinp_ref;
  for (int64_t i = 0; i < M * n_in; ++i) dinp_acc_ref[i] += dinp0[i];

  for (GemmBackend backend : kBackends) {
    BackendScope scope(backend);
    SCOPED_TRACE(gemm_backend_name(backend));
    std::vector<float> dinp(M * n_in, 123.0f), dW = dW0, db = db0;
    linear_backward<float, float>(dinp.data(), dW.data(), db.data(), dout.data(), inp.data(), W.data(), M,
                                  n_in, n_out, false, nullptr);
    expect_close(dinp, dinp_ref, 1e-5, 1e-5);
    expect_close(dW, dW_ref, 1e-5, 1e-5);
    expect_close(db, db_ref, 1e-5, 1e-5);

    dinp = dinp0;
    dW = dW0;
    linear_backward<float, float>(dinp.data(), dW.data(), nullptr, dout.data(), inp.data(), W.data(), M, n_in,
                                  n_out, true, nullptr);
    expect_close(dinp, dinp_acc_ref, 1e-5, 1e-5);
    expect_close(dW, dW_ref, 1e-5, 1e-5);

    dW = dW0;
    linear_backward<float, float>(nullptr, dW.data(), nullptr, dout.data(), inp.data(), W.data(), M, n_in,
                                  n_out, false, nullptr);
    expect_close(dW, dW_ref, 1e-5, 1e-5);
  }
}

// The 16-bit linear layer against the fp32 one on the same (rounded) values: one rounding into T apart.
template <typename T>
void check_linear_forward_16bit() {
  const int64_t M = 40, n_in = 50, n_out = 600;  // n_out crosses an f16 tile edge, so the bias is offset
  const auto inp = random_values<T>(M * n_in, 1), W = random_values<T>(n_in * n_out, 2);
  const auto bias = random_values<T>(n_out, 3), residual = random_values<T>(M * n_out, 4);
  const auto inp_f = to_floats(inp), W_f = to_floats(W), bias_f = to_floats(bias);
  std::vector<float> scratch(gemm_scratch_floats(dtype_of<T>(), cpu_isa(), omp_get_max_threads()));
  for (bool with_bias : {false, true}) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE("bias=" + std::to_string(with_bias) + " accumulate=" + std::to_string(accumulate));
      std::vector<T> out = accumulate ? residual : std::vector<T>(M * n_out, round_to<T>(123.0f));
      std::vector<float> out_f = to_floats(out);
      linear_forward<float>(out_f.data(), inp_f.data(), W_f.data(), with_bias ? bias_f.data() : nullptr, M,
                            n_in, n_out, accumulate, nullptr);
      linear_forward<T>(out.data(), inp.data(), W.data(), with_bias ? bias.data() : nullptr, M, n_in, n_out,
                        accumulate, scratch.data());
      expect_close(to_floats(out), to_double(out_f), unit_roundoff<T>() + 1e-5, 1e-4);
    }
  }
}

TEST(KernelMatmul, LinearForward16Bit) {
  check_linear_forward_16bit<bf16>();
  check_linear_forward_16bit<f16>();
}

template <typename T, typename G>
void check_linear_backward_16bit() {
  const int64_t M = 600, n_in = 40, n_out = 75;  // M crosses f16 tile edges: dinp rows, dweight depth
  const auto inp = random_values<T>(M * n_in, 1), W = random_values<T>(n_in * n_out, 2);
  const auto dout = random_values<T>(M * n_out, 3), dinp0 = random_values<T>(M * n_in, 4);
  const auto dW0 = random_values<G>(n_in * n_out, 5), db0 = random_values<G>(n_out, 6);
  const auto inp_f = to_floats(inp), W_f = to_floats(W), dout_f = to_floats(dout);
  std::vector<float> scratch(gemm_scratch_floats(dtype_of<T>(), cpu_isa(), omp_get_max_threads()));
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE("accumulate=" + std::to_string(accumulate));
    std::vector<T> dinp = dinp0;
    std::vector<G> dW = dW0, db = db0;
    std::vector<float> dinp_f = to_floats(dinp0), dW_f = to_floats(dW0), db_f = to_floats(db0);
    linear_backward<float, float>(dinp_f.data(), dW_f.data(), db_f.data(), dout_f.data(), inp_f.data(),
                                  W_f.data(), M, n_in, n_out, accumulate, nullptr);
    linear_backward<T, G>(dinp.data(), dW.data(), db.data(), dout.data(), inp.data(), W.data(), M, n_in,
                          n_out, accumulate, scratch.data());
    expect_close(to_floats(dinp), to_double(dinp_f), unit_roundoff<T>() + 1e-5, 1e-4);
    expect_close(to_floats(dW), to_double(dW_f), unit_roundoff<G>() + 1e-5, 1e-4);
    // The same fp32 sums in the same order, rounded once: exactly the fp32 layer's bias gradient, rounded.
    for (int64_t j = 0; j < n_out; ++j) EXPECT_EQ(to_f32(db[j]), to_f32(round_to<G>(db_f[j]))) << j;
  }
  std::vector<G> dW = dW0;
  std::vector<float> dW_f = to_floats(dW0);
  linear_backward<float, float>(nullptr, dW_f.data(), nullptr, dout_f.data(), inp_f.data(), W_f.data(), M,
                                n_in, n_out, false, nullptr);
  linear_backward<T, G>(nullptr, dW.data(), nullptr, dout.data(), inp.data(), W.data(), M, n_in, n_out, false,
                        scratch.data());
  expect_close(to_floats(dW), to_double(dW_f), unit_roundoff<G>() + 1e-5, 1e-4);
}

TEST(KernelMatmul, LinearBackward16Bit) {
  check_linear_backward_16bit<bf16, float>();
  check_linear_backward_16bit<bf16, bf16>();
  check_linear_backward_16bit<f16, float>();
}

// Weights in nn.Linear layout [out, in] give what the transposed [in, out] weights give, forward and backward
// (the dW of one is the transpose of the other's), in fp32 and bf16.
template <typename T>
void check_out_in_layout() {
  std::vector<float> scratch(gemm_scratch_floats(dtype_of<T>(), cpu_isa(), omp_get_max_threads()));
  const int64_t M = 37, n_in = 24, n_out = 40;
  const auto inp = random_values<T>(M * n_in, 1), w_out_in = random_values<T>(n_out * n_in, 2);
  const auto dout = random_values<T>(M * n_out, 3), bias = random_values<T>(n_out, 4);
  std::vector<T> w_in_out(n_in * n_out);
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t i = 0; i < n_in; ++i) w_in_out[i * n_out + o] = w_out_in[o * n_in + i];
  std::vector<T> out_a(M * n_out), out_b(M * n_out), dinp_a(M * n_in), dinp_b(M * n_in);
  std::vector<float> dw_a(n_out * n_in), dw_b(n_in * n_out), db_a(n_out), db_b(n_out);
  linear_forward<T>(out_a.data(), inp.data(), w_out_in.data(), bias.data(), M, n_in, n_out, false,
                    scratch.data(), WeightLayout::out_in);
  linear_forward<T>(out_b.data(), inp.data(), w_in_out.data(), bias.data(), M, n_in, n_out, false,
                    scratch.data());
  linear_backward<T, float>(dinp_a.data(), dw_a.data(), db_a.data(), dout.data(), inp.data(), w_out_in.data(),
                            M, n_in, n_out, false, scratch.data(), WeightLayout::out_in);
  linear_backward<T, float>(dinp_b.data(), dw_b.data(), db_b.data(), dout.data(), inp.data(), w_in_out.data(),
                            M, n_in, n_out, false, scratch.data());
  std::vector<double> dw_b_transposed(n_out * n_in);
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t i = 0; i < n_in; ++i) dw_b_transposed[o * n_in + i] = dw_b[i * n_out + o];
  expect_close(to_floats(out_a), to_double(to_floats(out_b)), 1e-5, 1e-5);
  expect_close(to_floats(dinp_a), to_double(to_floats(dinp_b)), 1e-5, 1e-5);
  expect_close(dw_a, dw_b_transposed, 1e-5, 1e-5);
  EXPECT_TRUE(bitwise_equal(db_a, db_b));
}

TEST(KernelMatmul, OutInWeightLayout) {
  check_out_in_layout<float>();
  check_out_in_layout<bf16>();
}

TEST(KernelMatmul, BiasGradientSameBitsForAnyThreadCount) {
  const int64_t M = 1021, n_in = 8, n_out = 200;
  const auto inp = random_floats(M * n_in, 1), W = random_floats(n_in * n_out, 2);
  const auto dout = random_floats(M * n_out, 3);
  std::vector<std::vector<float>> dbias;
  for (int threads : {1, 2, 3}) {
    with_threads(threads, [&] {
      std::vector<float> dW(n_in * n_out), db(n_out);
      linear_backward<float, float>(nullptr, dW.data(), db.data(), dout.data(), inp.data(), W.data(), M, n_in,
                                    n_out, false, nullptr);
      dbias.push_back(db);
    });
  }
  EXPECT_TRUE(bitwise_equal(dbias[0], dbias[1]));
  EXPECT_TRUE(bitwise_equal(dbias[0], dbias[2]));
}

}  // namespace
}  // namespace mt::kernels
