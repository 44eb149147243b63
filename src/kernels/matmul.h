// Matrix products (fp32, row-major) through a well-kept library, and the linear layer built on them.
// Linear weights are stored [in, out] (the layout of Hugging Face GPT-2's Conv1D), so y = x @ W + b.
#pragma once

#include <cstdint>
#include <string_view>

namespace mt::kernels {

enum class GemmBackend { onednn, openblas };

// The backend training uses (the build's default; bench/ switches it to compare).
GemmBackend gemm_backend();
void set_gemm_backend(GemmBackend backend);
std::string_view gemm_backend_name(GemmBackend backend);

// C[M,N] = alpha * op(A) @ op(B) + beta * C, op(X) = X^T when trans_X. Leading dimensions are row strides.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// out[M,n_out] = inp[M,n_in] @ weight[n_in,n_out] + bias (bias may be null).
// With accumulate, the product is added to what out holds (used to fuse the residual add).
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                    int64_t n_in, int64_t n_out, bool accumulate);

// dweight[n_in,n_out] += inp^T @ dout; dbias[n_out] += column sums of dout (dbias may be null);
// dinp[M,n_in] = dout @ weight^T, or += with accumulate_dinp (dinp may be null: no input gradient).
// The column sums run in a fixed order, so results do not depend on the thread count.
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t M, int64_t n_in, int64_t n_out, bool accumulate_dinp);

}  // namespace mt::kernels
