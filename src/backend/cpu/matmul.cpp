// Matrix products through oneDNN or OpenBLAS, and the linear layer (bias fused) built on them. fp32 goes to
// the chosen backend's sgemm; bf16 to oneDNN's matmul primitive where the level has it (AVX-512 and up),
// else, as f16 always, through fp32 tiles to sgemm.
#include "backend/cpu/matmul.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "backend/cpu/column_blocks.h"
#include "backend/cpu/isa_variant.h"
#include "backend/cpu/onednn_matmul.h"
#include "backend/cpu/typed_io.h"
#include "core/int_math.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

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

// C = op(A) @ op(B) + beta * C through oneDNN's sgemm.
void onednn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  if (status != dnnl_success)
    throw std::runtime_error("dnnl_sgemm failed with status " + std::to_string(status));
}

}  // namespace

// This level's gemm, declared as in matmul.h: the fp32 product below is its specialization.
template <typename In, typename Out>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const In* A, int64_t lda, const In* B,
          int64_t ldb, float beta, Out* C, int64_t ldc, float* scratch);

template <>
void gemm<float, float>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                        int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                        float* /*scratch*/) {
  if (gemm_backend() == GemmBackend::onednn)
    return onednn_sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  match_openblas_threads();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

namespace {

// Rows, columns and depth of one conversion tile. Each thread holds its own A, B and (for 16-bit output) C
// tiles, 2 MiB, and multiplies them single-threaded: one parallel region per product, with no barrier
// between its K steps, which cost most when other jobs hold the cores.
constexpr int64_t kTileM = 256, kTileN = 512, kTileK = 512;
constexpr int64_t kTileScratchFloats = kTileM * kTileK + kTileK * kTileN + kTileM * kTileN;

// dst[rows, cols] (row stride ld_dst) = src[rows, cols] (row stride ld_src), converted element by element.
template <typename To, typename From>
void convert_block(To* dst, int64_t ld_dst, const From* src, int64_t ld_src, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) convert_n(dst + r * ld_dst, src + r * ld_src, cols);
}

// acc[rows, cols] = (keep ? acc : 0) + bias, row by row.
template <typename In>
void add_bias(float* acc, int64_t ld, const In* bias, int64_t rows, int64_t cols, bool keep) {
  for (int64_t r = 0; r < rows; ++r) {
    float* a = acc + r * ld;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) a[c] = (keep ? a[c] : 0.0f) + to_f32(bias[c]);
  }
}

// One output tile C[i0:i0+mt, j0:j0+nt] of tiled_matmul, in the calling thread, with its tiles at `tiles`.
template <typename In, typename Out>
void tiled_block(bool trans_a, bool trans_b, int64_t i0, int64_t mt, int64_t j0, int64_t nt, int64_t K,
                 const In* A, int64_t lda, const In* B, int64_t ldb, const In* bias, bool accumulate, Out* C,
                 int64_t ldc, float* tiles) {
  float* a_tile = tiles;
  float* b_tile = a_tile + kTileM * kTileK;
  Out* c = C + i0 * ldc + j0;
  // An fp32 C accumulates in place; a 16-bit one in the C tile.
  float* acc = b_tile + kTileK * kTileN;
  int64_t ld_acc = nt;
  if constexpr (std::is_same_v<Out, float>) {
    acc = c;
    ld_acc = ldc;
  } else if (accumulate) {
    convert_block(acc, ld_acc, c, ldc, mt, nt);
  }
  if (bias) add_bias(acc, ld_acc, bias + j0, mt, nt, accumulate);
  float beta = (accumulate || bias) ? 1.0f : 0.0f;
  for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
    const int64_t kt = std::min(kTileK, K - k0);
    // The stored blocks are converted as they lie (row strides a_cols, b_cols); sgemm applies the transposes.
    const int64_t a_rows = trans_a ? kt : mt, a_cols = trans_a ? mt : kt;
    const int64_t b_rows = trans_b ? nt : kt, b_cols = trans_b ? kt : nt;
    convert_block(a_tile, a_cols, trans_a ? A + k0 * lda + i0 : A + i0 * lda + k0, lda, a_rows, a_cols);
    convert_block(b_tile, b_cols, trans_b ? B + j0 * ldb + k0 : B + k0 * ldb + j0, ldb, b_rows, b_cols);
    // oneDNN runs one thread inside a parallel region (OpenBLAS, a pthread pool of its own, would not).
    onednn_sgemm(trans_a, trans_b, mt, nt, kt, a_tile, a_cols, b_tile, b_cols, beta, acc, ld_acc);
    beta = 1.0f;
  }
  if constexpr (!std::is_same_v<Out, float>) convert_block(c, ldc, acc, ld_acc, mt, nt);
}

// C = op(A) @ op(B) + bias (+ C with accumulate) for 16-bit inputs the library does not multiply: each
// output tile accumulates in fp32 over K tiles converted exactly to fp32, and is rounded into Out once. The
// tiles are shared out among the threads; every element's sum runs in the same order whatever their count.
template <typename In, typename Out>
void tiled_matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const In* A, int64_t lda,
                  const In* B, int64_t ldb, const In* bias, bool accumulate, Out* C, int64_t ldc,
                  float* scratch) {
  if (!scratch) throw std::logic_error("16-bit product without its conversion tiles (gemm_scratch_floats)");
  // Tiles of near-equal size, so that the threads' shares stay balanced (768 columns: 384 + 384, not
  // 512 + 256); they depend on the shape alone, never on the thread count.
  const int64_t row_tiles = ceil_div(M, kTileM), col_tiles = ceil_div(N, kTileN);
  const int64_t tile_m = round_up(ceil_div(M, row_tiles), 16), tile_n = round_up(ceil_div(N, col_tiles), 16);
  // The first error of any thread, rethrown after the region: an exception must not leave it.
  std::string error;
#pragma omp parallel
  {
    float* tiles = scratch + omp_get_thread_num() * kTileScratchFloats;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < row_tiles * col_tiles; ++t) {
      const int64_t i0 = t / col_tiles * tile_m, j0 = t % col_tiles * tile_n;
      try {
        tiled_block(trans_a, trans_b, i0, std::min(tile_m, M - i0), j0, std::min(tile_n, N - j0), K, A, lda,
                    B, ldb, bias, accumulate, C, ldc, tiles);
      } catch (const std::exception& e) {
#pragma omp critical(memtrain_tiled_matmul_error)
        if (error.empty()) error = e.what();
      }
    }
  }
  if (!error.empty()) throw std::runtime_error(error);
}

// The 16-bit products: bf16 through oneDNN where the active level has its bf16 product, else fp32 tiles.
template <typename In, typename Out>
void matmul16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const In* A, int64_t lda,
              const In* B, int64_t ldb, const In* bias, bool accumulate, Out* C, int64_t ldc,
              float* scratch) {
  if constexpr (std::is_same_v<In, bf16>) {
    if (native_bf16_gemm(cpu_isa()))
      return onednn_matmul(trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, accumulate, C, ldc);
  }
  tiled_matmul(trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, accumulate, C, ldc, scratch);
}

// dbias[j] += sum over rows of dout[:, j], summed in fp32 and rounded into G once.
template <typename T, typename G>
void add_column_sums(G* dbias, const T* dout, int64_t M, int64_t n_out) {
  parallel_over_column_blocks(n_out, [&](int64_t j0, int64_t j1) {
    float sum[kColumnBlock] = {};
    for (int64_t i = 0; i < M; ++i) {
      const T* row = dout + i * n_out;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) sum[j - j0] += to_f32(row[j]);
    }
    for (int64_t j = j0; j < j1; ++j) dbias[j] = round_to<G>(to_f32(dbias[j]) + sum[j - j0]);
  });
}

}  // namespace

template <typename In, typename Out>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const In* A, int64_t lda, const In* B,
          int64_t ldb, float beta, Out* C, int64_t ldc, float* scratch) {
  // The libraries add C through a sum post-op or an fp32 tile, neither of which scales it.
  if (beta != 0.0f && beta != 1.0f) throw std::invalid_argument("16-bit gemm takes beta 0 or 1");
  matmul16(trans_a, trans_b, M, N, K, A, lda, B, ldb, static_cast<const In*>(nullptr), beta == 1.0f, C, ldc,
           scratch);
}

namespace {

// out[M, N] (rows ldc apart) = inp[M, K] @ w + bias, w [K, N] (rows ldw apart) or, with trans_w, w^T for w
// [N, K]; with accumulate, added to what out holds. A linear layer's product, or a column tile of one.
template <typename T>
void linear_into(T* out, int64_t ldc, const T* inp, const T* w, int64_t ldw, bool trans_w, const T* bias,
                 int64_t M, int64_t K, int64_t N, bool accumulate, float* scratch) {
  if constexpr (std::is_same_v<T, float>) {
    // The bias goes in first, so the product can land on it with beta = 1.
    if (bias) {
#pragma omp parallel for
      for (int64_t i = 0; i < M; ++i) {
        float* row = out + i * ldc;
        if (accumulate) {
#pragma omp simd
          for (int64_t j = 0; j < N; ++j) row[j] += bias[j];
        } else {
          std::copy(bias, bias + N, row);
        }
      }
    }
    gemm(false, trans_w, M, N, K, inp, K, w, ldw, (bias || accumulate) ? 1.0f : 0.0f, out, ldc, scratch);
  } else {
    matmul16(false, trans_w, M, N, K, inp, K, w, ldw, bias, accumulate, out, ldc, scratch);
  }
}

}  // namespace

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t M, int64_t n_in,
                    int64_t n_out, bool accumulate, float* scratch, WeightLayout layout) {
  const bool out_in = layout == WeightLayout::out_in;
  linear_into(out, n_out, inp, weight, out_in ? n_in : n_out, out_in, bias, M, n_in, n_out, accumulate,
              scratch);
}

template <typename T>
void quantized_linear_forward(T* out, const T* inp, QuantizedMatrix weight, const T* bias, int64_t M,
                              int64_t n_in, int64_t n_out, bool accumulate, T* tile, float* scratch,
                              WeightLayout layout) {
  // Output columns [c0, c0 + n): stored rows of [n_out, n_in], or columns of [n_in, n_out].
  const bool out_in = layout == WeightLayout::out_in;
  for (int64_t c0 = 0; c0 < n_out; c0 += kQuantizedTileColumns) {
    const int64_t n = std::min(kQuantizedTileColumns, n_out - c0);
    if (out_in)
      dequantize_matrix_tile(weight, n_in, c0, n, 0, n_in, tile);
    else
      dequantize_matrix_tile(weight, n_out, 0, n_in, c0, n, tile);
    linear_into(out + c0, n_out, inp, tile, out_in ? n_in : n, out_in, bias ? bias + c0 : nullptr, M, n_in, n,
                accumulate, scratch);
  }
}

template <typename T>
void quantized_linear_backward_input(T* dinp, const T* dout, QuantizedMatrix weight, int64_t M, int64_t n_in,
                                     int64_t n_out, bool accumulate_dinp, T* tile, float* scratch,
                                     WeightLayout layout) {
  // Input columns [c0, c0 + n): columns of [n_out, n_in], or stored rows of [n_in, n_out].
  const bool out_in = layout == WeightLayout::out_in;
  for (int64_t c0 = 0; c0 < n_in; c0 += kQuantizedTileColumns) {
    const int64_t n = std::min(kQuantizedTileColumns, n_in - c0);
    if (out_in)
      dequantize_matrix_tile(weight, n_in, 0, n_out, c0, n, tile);
    else
      dequantize_matrix_tile(weight, n_out, c0, n, 0, n_out, tile);
    gemm(false, !out_in, M, n, n_out, dout, n_out, tile, out_in ? n : n_out, accumulate_dinp ? 1.0f : 0.0f,
         dinp + c0, n_in, scratch);
  }
}

template <typename T, typename G>
void linear_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight, int64_t M,
                     int64_t n_in, int64_t n_out, bool accumulate_dinp, float* scratch, WeightLayout layout) {
  const bool out_in = layout == WeightLayout::out_in;
  if (dinp) {
    gemm(false, !out_in, M, n_in, n_out, dout, n_out, weight, out_in ? n_in : n_out,
         accumulate_dinp ? 1.0f : 0.0f, dinp, n_in, scratch);
  }
  if (dweight && out_in)
    gemm(true, false, n_out, n_in, M, dout, n_out, inp, n_in, 1.0f, dweight, n_in, scratch);
  else if (dweight)
    gemm(true, false, n_in, n_out, M, inp, n_in, dout, n_out, 1.0f, dweight, n_out, scratch);
  if (dbias) add_column_sums(dbias, dout, M, n_out);
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
namespace {

constexpr std::string_view kDefaultBackend = MEMTRAIN_GEMM_DEFAULT;
static_assert(kDefaultBackend == "onednn" || kDefaultBackend == "openblas",
              "MEMTRAIN_GEMM must be onednn or openblas");

GemmBackend current_backend = kDefaultBackend == "openblas" ? GemmBackend::openblas : GemmBackend::onednn;

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

int64_t gemm_scratch_floats(DType in, CpuIsa isa, int threads) {
  const bool tiled = in == DType::f16 || (in == DType::bf16 && !native_bf16_gemm(isa));
  return tiled ? MT_ISA::kTileScratchFloats * threads : 0;
}

template <typename In, typename Out>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const In* A, int64_t lda, const In* B,
          int64_t ldb, float beta, Out* C, int64_t ldc, float* scratch) {
  dispatch<&gemm<In, Out>>(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, scratch);
}

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t M, int64_t n_in,
                    int64_t n_out, bool accumulate, float* scratch, WeightLayout layout) {
  dispatch<&linear_forward<T>>(out, inp, weight, bias, M, n_in, n_out, accumulate, scratch, layout);
}

template <typename T>
void quantized_linear_forward(T* out, const T* inp, QuantizedMatrix weight, const T* bias, int64_t M,
                              int64_t n_in, int64_t n_out, bool accumulate, T* tile, float* scratch,
                              WeightLayout layout) {
  dispatch<&quantized_linear_forward<T>>(out, inp, weight, bias, M, n_in, n_out, accumulate, tile, scratch,
                                         layout);
}

template <typename T>
void quantized_linear_backward_input(T* dinp, const T* dout, QuantizedMatrix weight, int64_t M, int64_t n_in,
                                     int64_t n_out, bool accumulate_dinp, T* tile, float* scratch,
                                     WeightLayout layout) {
  dispatch<&quantized_linear_backward_input<T>>(dinp, dout, weight, M, n_in, n_out, accumulate_dinp, tile,
                                                scratch, layout);
}

template <typename T, typename G>
void linear_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight, int64_t M,
                     int64_t n_in, int64_t n_out, bool accumulate_dinp, float* scratch, WeightLayout layout) {
  dispatch<&linear_backward<T, G>>(dinp, dweight, dbias, dout, inp, weight, M, n_in, n_out, accumulate_dinp,
                                   scratch, layout);
}

template void gemm<float, float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                                 int64_t, float, float*, int64_t, float*);
template void linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t,
                                    int64_t, bool, float*, WeightLayout);
template void gemm<bf16, float>(bool, bool, int64_t, int64_t, int64_t, const bf16*, int64_t, const bf16*,
                                int64_t, float, float*, int64_t, float*);
template void gemm<bf16, bf16>(bool, bool, int64_t, int64_t, int64_t, const bf16*, int64_t, const bf16*,
                               int64_t, float, bf16*, int64_t, float*);
template void gemm<f16, float>(bool, bool, int64_t, int64_t, int64_t, const f16*, int64_t, const f16*,
                               int64_t, float, float*, int64_t, float*);
template void gemm<f16, f16>(bool, bool, int64_t, int64_t, int64_t, const f16*, int64_t, const f16*, int64_t,
                             float, f16*, int64_t, float*);
template void linear_forward<bf16>(bf16*, const bf16*, const bf16*, const bf16*, int64_t, int64_t, int64_t,
                                   bool, float*, WeightLayout);
template void linear_forward<f16>(f16*, const f16*, const f16*, const f16*, int64_t, int64_t, int64_t, bool,
                                  float*, WeightLayout);
template void quantized_linear_forward<float>(float*, const float*, QuantizedMatrix, const float*, int64_t,
                                              int64_t, int64_t, bool, float*, float*, WeightLayout);
template void quantized_linear_forward<bf16>(bf16*, const bf16*, QuantizedMatrix, const bf16*, int64_t,
                                             int64_t, int64_t, bool, bf16*, float*, WeightLayout);
template void quantized_linear_backward_input<float>(float*, const float*, QuantizedMatrix, int64_t, int64_t,
                                                     int64_t, bool, float*, float*, WeightLayout);
template void quantized_linear_forward<f16>(f16*, const f16*, QuantizedMatrix, const f16*, int64_t, int64_t,
                                            int64_t, bool, f16*, float*, WeightLayout);
template void quantized_linear_backward_input<f16>(f16*, const f16*, QuantizedMatrix, int64_t, int64_t,
                                                   int64_t, bool, f16*, float*, WeightLayout);
template void quantized_linear_backward_input<bf16>(bf16*, const bf16*, QuantizedMatrix, int64_t, int64_t,
                                                    int64_t, bool, bf16*, float*, WeightLayout);
template void linear_backward<float, float>(float*, float*, float*, const float*, const float*, const float*,
                                            int64_t, int64_t, int64_t, bool, float*, WeightLayout);
template void linear_backward<bf16, float>(bf16*, float*, float*, const bf16*, const bf16*, const bf16*,
                                           int64_t, int64_t, int64_t, bool, float*, WeightLayout);
template void linear_backward<bf16, bf16>(bf16*, bf16*, bf16*, const bf16*, const bf16*, const bf16*, int64_t,
                                          int64_t, int64_t, bool, float*, WeightLayout);
template void linear_backward<f16, float>(f16*, float*, float*, const f16*, const f16*, const f16*, int64_t,
                                          int64_t, int64_t, bool, float*, WeightLayout);
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
template <typename T>
bool enroll_type() {
  return enroll<&kernels::gemm<T, T>>(gemm) && enroll<&kernels::linear_forward<T>>(linear_forward) &&
         enroll<&kernels::linear_backward<T, float>>(linear_backward);
}
// Quantized frozen weights come in every type a run computes in.
template <typename T>
bool enroll_quantized() {
  return enroll<&kernels::quantized_linear_forward<T>>(quantized_linear_forward) &&
         enroll<&kernels::quantized_linear_backward_input<T>>(quantized_linear_backward_input);
}
const bool enrolled = enroll_type<float>() && enroll_type<bf16>() && enroll_type<f16>() &&
                      enroll<&kernels::gemm<bf16, float>>(gemm) && enroll<&kernels::gemm<f16, float>>(gemm) &&
                      enroll<&kernels::linear_backward<bf16, bf16>>(linear_backward) &&
                      enroll_quantized<float>() && enroll_quantized<bf16>() && enroll_quantized<f16>();
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
