// Matrix products (row-major) on the GPU through cuBLASLt, and the linear layer built on them: the CUDA
// mirror of backend/cpu/matmul.h. Inputs fp32, bf16 or f16, always accumulated in fp32 (CUBLAS_COMPUTE_32F;
// TF32 only after set_tf32(true)). A row-major C = A @ B is cuBLASLt's column-major C^T = B^T @ A^T, so the
// operands go in swapped. Every product takes the planned cuBLASLt workspace; nothing is allocated.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"
#include "exec/op_shapes.h"

namespace mt::cuda {

// Whether fp32 products may round their inputs to TF32 (CUBLAS_COMPUTE_32F_FAST_TF32): process-wide, off by
// default, so that fp32 runs match the CPU to fp32's rounding.
void set_tf32(bool enabled);
bool tf32_enabled();

// C[M,N] = op(A) @ op(B) + beta * C with A, B of type In and C of type Out (fp32 or In), accumulated in fp32;
// op(X) = X^T when trans_X, leading dimensions are row strides. Instantiated for In = Out = float; In = bf16
// or f16 with Out = float or In, where beta must be 0 or 1 (std::invalid_argument otherwise, as on the CPU)
// and a 16-bit C is rounded once. `workspace` is the planned cuBLASLt workspace of workspace_bytes.
template <typename In, typename Out>
void gemm(cublasLtHandle_t lt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const In* A,
          int64_t lda, const In* B, int64_t ldb, float beta, Out* C, int64_t ldc, void* workspace,
          int64_t workspace_bytes, cudaStream_t stream);

// out[M,N] (rows ldc apart) = inp[M,K] @ w + bias (bias may be null), w [K,N] (rows ldw apart) or, with
// trans_w, w^T for w [N,K], all of type T; with accumulate, added to what out holds. A linear layer's
// product, or a column tile of one (weight_quant.cuh's).
template <typename T>
void linear_into(cublasLtHandle_t lt, T* out, int64_t ldc, const T* inp, const T* w, int64_t ldw,
                 bool trans_w, const T* bias, int64_t M, int64_t K, int64_t N, bool accumulate,
                 void* workspace, int64_t workspace_bytes, cudaStream_t stream);

// out[M,n_out] = inp[M,n_in] @ weight[n_in,n_out] + bias (bias may be null), all of type T; with out_in the
// weight is [n_out,n_in] and transposed. With accumulate, the product (and bias) is added to what out holds.
template <typename T>
void linear_forward(cublasLtHandle_t lt, T* out, const T* inp, const T* weight, const T* bias, int64_t M,
                    int64_t n_in, int64_t n_out, bool accumulate, float* workspace, int64_t workspace_bytes,
                    WeightLayout layout, cudaStream_t stream);

// dweight[n_in,n_out] += inp^T @ dout (out_in: dweight[n_out,n_in] += dout^T @ inp); dbias[n_out] += column
// sums of dout (dweight, dbias may be null: frozen); dinp[M,n_in] = dout @ weight^T, or += with
// accumulate_dinp (dinp may be null). Activations and weights T, gradients G (float, or bf16 with T = bf16).
// The column sums use the workspace for per-chunk partial sums, combined in a fixed order.
template <typename T, typename G>
void linear_backward(cublasLtHandle_t lt, T* dinp, G* dweight, G* dbias, const T* dout, const T* inp,
                     const T* weight, int64_t M, int64_t n_in, int64_t n_out, bool accumulate_dinp,
                     float* workspace, int64_t workspace_bytes, WeightLayout layout, cudaStream_t stream);

}  // namespace mt::cuda
