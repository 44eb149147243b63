#include <gtest/gtest.h>

#include "kernels/matmul.h"
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
