// Matrix products (row-major) through a well-kept library, and the linear layer built on them. Inputs are
// fp32, bf16 or f16; products always accumulate in fp32. Linear weights are stored [in, out] (the layout of
// Hugging Face GPT-2's Conv1D), so y = x @ W + b, or [out, in] (torch.nn.Linear, LLaMA), so y = x @ W^T + b.
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/weight_quant.h"
#include "core/half.h"
#include "exec/op_shapes.h"

namespace mt::kernels {

enum class GemmBackend { onednn, openblas };

// The backend training uses (the build's default; bench/ switches it to compare).
GemmBackend gemm_backend();
void set_gemm_backend(GemmBackend backend);
std::string_view gemm_backend_name(GemmBackend backend);

// Floats of scratch a product of In-typed inputs needs at ISA level `isa` with `threads` OpenMP threads: 0
// where the library takes the type directly (fp32; bf16 with AVX512-BF16), fixed-size fp32 tiles per thread
// where it does not (f16, and bf16 without AVX512-BF16: the operands are converted tile by tile and
// multiplied in fp32, exactly, since every f16 and bf16 is an fp32).
int64_t gemm_scratch_floats(DType in, CpuIsa isa, int threads);

// C[M,N] = op(A) @ op(B) + beta * C with A, B of type In and C of type Out (fp32 or In), accumulated in fp32;
// op(X) = X^T when trans_X, and leading dimensions are row strides. Instantiated for In = Out = float; In =
// bf16 or f16 with Out = float or In, where beta must be 0 or 1 (std::invalid_argument otherwise) and a
// 16-bit C is rounded once. `scratch` holds gemm_scratch_floats(In, level, threads) floats for the active
// level and OpenMP's thread count (may be null when that is 0).
template <typename In, typename Out>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const In* A, int64_t lda, const In* B,
          int64_t ldb, float beta, Out* C, int64_t ldc, float* scratch);

// out[M,n_out] = inp[M,n_in] @ weight[n_in,n_out] + bias (bias may be null), all of type T; with out_in the
// weight is [n_out,n_in] and transposed. With accumulate, the product is added to what out holds (used to
// fuse the residual add).
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t M, int64_t n_in,
                    int64_t n_out, bool accumulate, float* scratch,
                    WeightLayout layout = WeightLayout::in_out);

// dweight[n_in,n_out] += inp^T @ dout (out_in: dweight[n_out,n_in] += dout^T @ inp); dbias[n_out] += column
// sums of dout (dweight, dbias may be null: frozen); dinp[M,n_in] = dout @ weight^T, or += with
// accumulate_dinp (dinp may be null: no input gradient). Activations and weights are T, gradients G (float,
// or bf16 with T = bf16). The column sums run in a fixed order, so results do not depend on the thread count.
template <typename T, typename G>
void linear_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight, int64_t M,
                     int64_t n_in, int64_t n_out, bool accumulate_dinp, float* scratch,
                     WeightLayout layout = WeightLayout::in_out);

// The same products with a quantized frozen weight (weight_quant.h; T float, bf16 or f16; its parts stacked
// by stored rows): the weight is dequantized kQuantizedTileColumns output (input) columns at a time into
// `tile`, of quantized_tile_elems(n_in, n_out) elements, each tile's product written straight into its
// columns, so the whole matrix never exists in T and each column's sum is one product, as with the whole
// weight.
constexpr int64_t kQuantizedTileColumns = 128;
constexpr int64_t quantized_tile_elems(int64_t n_in, int64_t n_out) {
  return kQuantizedTileColumns * (n_in > n_out ? n_in : n_out);
}
template <typename T>
void quantized_linear_forward(T* out, const T* inp, QuantizedMatrix weight, const T* bias, int64_t M,
                              int64_t n_in, int64_t n_out, bool accumulate, T* tile, float* scratch,
                              WeightLayout layout);
// dinp[M,n_in] = dout @ weight^T (or += with accumulate_dinp): a frozen weight has no gradient of its own.
template <typename T>
void quantized_linear_backward_input(T* dinp, const T* dout, QuantizedMatrix weight, int64_t M, int64_t n_in,
                                     int64_t n_out, bool accumulate_dinp, T* tile, float* scratch,
                                     WeightLayout layout);

}  // namespace mt::kernels
