// QLoRA's quantized frozen base on the GPU, the CUDA mirror of backend/cpu/matmul.h's quantized products:
// the weight's codes (core/weight_format.h, quantized at load by the CPU's quantizer and uploaded:
// CudaDevice::quantize_weight) are dequantized a tile of columns at a time into a planned tile, with the
// CPU's per-element arithmetic (core/weight_element.h), so every element is the CPU's bit for bit; each
// tile's product goes through cuBLASLt (matmul.cuh) straight into its columns, so the whole matrix never
// exists in 16 or 32 bits and each column's sum is one product, as with the whole weight.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"
#include "core/weight_format.h"
#include "exec/op_shapes.h"

namespace mt::cuda {

// The columns of a quantized weight one planned tile holds (DeviceTraits::dequant_tile_columns: each
// quantized product gets a tile of this many columns of the weight's longer side). 1024 keeps each tile's
// product wide enough to fill a GPU (M x 1024 x K) while the tile stays a few tens of MiB on the largest
// models (LLaMA-70B's 28672-long columns: 56 MiB in bf16, an eighth of its largest weight).
constexpr int64_t kDequantTileColumns = 1024;

// A product's planned dequantization tile: `columns` columns of T, each as long as the weight's longer side.
template <typename T>
struct DequantTile {
  T* data;
  int64_t columns;
};

// The tile of rows [row0, row0 + rows) and columns [col0, col0 + cols) of `weight` (its parts stacked by
// rows, their buffers in device memory) seen as a row-major matrix with rows of row_length, into
// out[rows, cols] (T float, bf16 or f16, rounded to nearest even): kernels::dequantize_matrix_tile's bits.
template <typename T>
void dequantize_matrix_tile(QuantizedMatrix weight, int64_t row_length, int64_t row0, int64_t rows,
                            int64_t col0, int64_t cols, T* out, cudaStream_t stream);

// out[M,out] = inp[M,in] @ weight + bias (bias may be null), or added to what out holds with accumulate; the
// weight [in,out], or [out,in] transposed (s.layout).
template <typename T>
void quantized_linear_forward(cublasLtHandle_t lt, T* out, const T* inp, QuantizedMatrix weight,
                              const T* bias, const LinearShape& s, bool accumulate, DequantTile<T> tile,
                              void* workspace, int64_t workspace_bytes, cudaStream_t stream);

// dinp[M,in] = dout[M,out] @ weight^T, or += with accumulate_dinp: a frozen weight has no gradient of its
// own.
template <typename T>
void quantized_linear_backward_input(cublasLtHandle_t lt, T* dinp, const T* dout, QuantizedMatrix weight,
                                     const LinearShape& s, bool accumulate_dinp, DequantTile<T> tile,
                                     void* workspace, int64_t workspace_bytes, cudaStream_t stream);

}  // namespace mt::cuda
