// Matrix products through oneDNN or OpenBLAS, and the linear layer (bias fused) built on them.
#include "kernels/matmul.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/column_blocks.h"

namespace mt::kernels {

namespace {

constexpr std::string_view kDefaultBackend = MEMTRAIN_GEMM_DEFAULT;
static_assert(kDefaultBackend == "onednn" || kDefaultBackend == "openblas",
              "MEMTRAIN_GEMM must be onednn or openblas");

GemmBackend current_backend = kDefaultBackend == "openblas" ? GemmBackend::openblas : GemmBackend::onednn;

// Debian's OpenBLAS runs its own pthread pool beside OpenMP's; keeping it at OpenMP's thread count stops the
// two pools from oversubscribing the cores when the caller lowered omp_set_num_threads.
void match_openblas_threads() {
  static int openblas_threads = 0;
  const int threads = omp_get_max_threads();
  if (threads != openblas_threads) {
    openblas_set_num_threads(threads);
    openblas_threads = threads;
  }
}

}  // namespace

GemmBackend gemm_backend() {
  return current_backend;
}

void set_gemm_backend(GemmBackend backend) {
  current_backend = backend;
}

std::string_view gemm_backend_name(GemmBackend backend) {
  return backend == GemmBackend::openblas ? "openblas" : "onednn";
}

int64_t gemm_scratch_floats(DType /*in*/) {
  return 0;
}

template <>
void gemm<float, float>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                        float* /*scratch*/) {
  const float alpha = 1.0f;
  if (current_backend == GemmBackend::onednn) {
    const dnnl_status_t status =
        dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (status != dnnl_success)
      throw std::runtime_error("dnnl_sgemm failed with status " + std::to_string(status));
    return;
  }
  match_openblas_threads();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void linear_forward<float>(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                           int64_t n_in, int64_t n_out, bool accumulate, float* scratch) {
  // The bias goes in first, so the product can land on it with beta = 1.
  if (bias) {
#pragma omp parallel for
    for (int64_t i = 0; i < M; ++i) {
      float* row = out + i * n_out;
      if (accumulate) {
#pragma omp simd
        for (int64_t j = 0; j < n_out; ++j) row[j] += bias[j];
      } else {
        std::copy(bias, bias + n_out, row);
      }
    }
  }
  const float beta = (bias || accumulate) ? 1.0f : 0.0f;
  gemm(false, false, M, n_out, n_in, inp, n_in, weight, n_out, beta, out, n_out, scratch);
}

template <>
void linear_backward<float, float>(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, int64_t M, int64_t n_in,
                                   int64_t n_out, bool accumulate_dinp, float* scratch) {
  if (dinp) {
    gemm(false, true, M, n_in, n_out, dout, n_out, weight, n_out, accumulate_dinp ? 1.0f : 0.0f, dinp, n_in,
         scratch);
  }
  gemm(true, false, n_in, n_out, M, inp, n_in, dout, n_out, 1.0f, dweight, n_out, scratch);
  if (dbias) {
    parallel_over_column_blocks(n_out, [&](int64_t j0, int64_t j1) {
      float sum[kColumnBlock] = {};
      for (int64_t i = 0; i < M; ++i) {
        const float* row = dout + i * n_out;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) sum[j - j0] += row[j];
      }
      for (int64_t j = j0; j < j1; ++j) dbias[j] += sum[j - j0];
    });
  }
}

}  // namespace mt::kernels
