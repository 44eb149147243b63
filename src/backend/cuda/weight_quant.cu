// The dequantizing kernel (one thread per element of the tile, each element's block absmax read back as the
// CPU does) and the products over its tiles, in the CPU's tile order (backend/cpu/matmul.cpp) with this
// backend's tile width.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "backend/cpu/weight_quant.h"
#include "backend/cuda/adamw_8bit.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/weight_quant.cuh"
#include "core/host_device.h"

namespace mt::cuda {

// This build's copy of the shared arithmetic (its top says why it has no namespace of its own).
#include "core/weight_element.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // a grid-stride loop covers larger tiles

__constant__ std::array<float, 16> nf4_values = kernels::kNf4Values;

// out[rows, cols] = elements (row0 + r) * row_length + col0 + c of q.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    dequantize_tile_kernel(QuantizedWeight q, int64_t row_length, int64_t row0, int64_t rows, int64_t col0,
                           int64_t cols, T* __restrict__ out, const float* __restrict__ signed_map) {
  const int64_t total = rows * cols;
  for (int64_t e = blockIdx.x * int64_t{kThreads} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * kThreads) {
    const int64_t i = (row0 + e / cols) * row_length + col0 + e % cols;
    const float absmax = stored_weight_absmax(q, i / kWeightBlock, signed_map);
    out[e] =
        round_to<T>(q.format == WeightFormat::int8 ? int8_weight_value(q.codes, i, int8_weight_scale(absmax))
                                                   : nf4_weight_value(q.codes, i, absmax, nf4_values.data()));
  }
}

}  // namespace

template <typename T>
void dequantize_matrix_tile(QuantizedMatrix weight, int64_t row_length, int64_t row0, int64_t rows,
                            int64_t col0, int64_t cols, T* out, cudaStream_t stream) {
  const float* signed_map = signed_dynamic_map_values();
  for_each_part_of_rows(weight, row_length, row0, rows,
                        [&](const QuantizedWeight& part, int64_t first, int64_t count, int64_t tile_row) {
                          const int64_t blocks =
                              std::clamp<int64_t>((count * cols + kThreads - 1) / kThreads, 1, kMaxBlocks);
                          dequantize_tile_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
                              part, row_length, first, count, col0, cols, out + tile_row * cols, signed_map);
                          check_launch("dequantize_matrix_tile");
                        });
}

template <typename T>
void quantized_linear_forward(cublasLtHandle_t lt, T* out, const T* inp, QuantizedMatrix weight,
                              const T* bias, const LinearShape& s, bool accumulate, DequantTile<T> tile,
                              void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  // Output columns [c0, c0 + n): stored rows of [out, in], or columns of [in, out].
  const bool out_in = s.layout == WeightLayout::out_in;
  for (int64_t c0 = 0; c0 < s.out; c0 += tile.columns) {
    const int64_t n = std::min(tile.columns, s.out - c0);
    if (out_in)
      dequantize_matrix_tile(weight, s.in, c0, n, 0, s.in, tile.data, stream);
    else
      dequantize_matrix_tile(weight, s.out, 0, s.in, c0, n, tile.data, stream);
    linear_into(lt, out + c0, s.out, inp, tile.data, out_in ? s.in : n, out_in, bias ? bias + c0 : nullptr,
                s.M, s.in, n, accumulate, workspace, workspace_bytes, stream);
  }
}

template <typename T>
void quantized_linear_backward_input(cublasLtHandle_t lt, T* dinp, const T* dout, QuantizedMatrix weight,
                                     const LinearShape& s, bool accumulate_dinp, DequantTile<T> tile,
                                     void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  // Input columns [c0, c0 + n): columns of [out, in], or stored rows of [in, out].
  const bool out_in = s.layout == WeightLayout::out_in;
  for (int64_t c0 = 0; c0 < s.in; c0 += tile.columns) {
    const int64_t n = std::min(tile.columns, s.in - c0);
    if (out_in)
      dequantize_matrix_tile(weight, s.in, 0, s.out, c0, n, tile.data, stream);
    else
      dequantize_matrix_tile(weight, s.out, c0, n, 0, s.out, tile.data, stream);
    gemm(lt, false, !out_in, s.M, n, s.out, dout, s.out, tile.data, out_in ? n : s.out,
         accumulate_dinp ? 1.0f : 0.0f, dinp + c0, s.in, workspace, workspace_bytes, stream);
  }
}

#define MT_WEIGHT_QUANT(T)                                                                                   \
  template void dequantize_matrix_tile<T>(QuantizedMatrix, int64_t, int64_t, int64_t, int64_t, int64_t, T*,  \
                                          cudaStream_t);                                                     \
  template void quantized_linear_forward<T>(cublasLtHandle_t, T*, const T*, QuantizedMatrix, const T*,       \
                                            const LinearShape&, bool, DequantTile<T>, void*, int64_t,        \
                                            cudaStream_t);                                                   \
  template void quantized_linear_backward_input<T>(cublasLtHandle_t, T*, const T*, QuantizedMatrix,          \
                                                   const LinearShape&, bool, DequantTile<T>, void*, int64_t, \
                                                   cudaStream_t);
MT_WEIGHT_QUANT(float)
MT_WEIGHT_QUANT(bf16)
MT_WEIGHT_QUANT(f16)
#undef MT_WEIGHT_QUANT

}  // namespace mt::cuda
