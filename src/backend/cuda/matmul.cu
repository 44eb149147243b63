// Matrix products through cuBLASLt (descriptors per call, the heuristic's algorithm cached per shape,
// alignment and handle), the linear layer's bias through cuBLASLt's BIAS epilogue (D = A @ B + beta * C +
// bias, rounded once: the CPU's semantics), and the bias gradient as deterministic column sums.
//
// Determinism: cuBLASLt gives the same bits for the same algorithm on the same GPU. The heuristic is asked
// only for split-K schemes that reduce in fp32 (COMPUTE_TYPE, in the workspace; INPLACE only for an fp32 D,
// whose counters keep the order fixed): a 16-bit D is then rounded once, as on the CPU, and no scheme adds
// through atomics.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/matmul.cuh"

namespace mt::cuda {

namespace {

std::atomic<bool> tf32_products{false};

template <typename X>
constexpr cudaDataType data_type() {
  if constexpr (std::is_same_v<X, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<X, bf16>) return CUDA_R_16BF;
  if constexpr (std::is_same_v<X, f16>) return CUDA_R_16F;
  static_assert(std::is_same_v<X, float> || std::is_same_v<X, bf16> || std::is_same_v<X, f16>);
}

// The largest power of two (up to 256, cuBLASLt's default preference) dividing the address: an operand that
// starts inside a tensor (a LoRA column range) rules out the algorithms that need more.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// One product in cuBLASLt's column-major terms: D[m,n] = op(A)[m,k] @ op(B)[k,n] + beta * D (+ bias[m]).
struct LtProduct {
  cudaDataType in_type, out_type;
  cublasComputeType_t compute;
  bool trans_a, trans_b;
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* d;
  int64_t ldd;
  const void* bias;  // D-typed, m elements; null: none
  float beta;
};

// Descriptors of one call, destroyed however it ends.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename V>
void set_op(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const V& value, const char* what) {
  MT_CUDA_CHECK(what, cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof(value)));
}
template <typename V>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const V& value,
              const char* what) {
  MT_CUDA_CHECK(what, cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

void describe(LtDescriptors& desc, const LtProduct& p, int64_t workspace_bytes, const char* what) {
  MT_CUDA_CHECK(what, cublasLtMatmulDescCreate(&desc.op, p.compute, CUDA_R_32F));
  const int32_t trans_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                trans_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_op(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, trans_a, what);
  set_op(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, trans_b, what);
  if (p.bias) {
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    set_op(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, what);
    set_op(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, what);
  }
  // Stored shapes: op(A) is m x k, so A is k x m when transposed.
  MT_CUDA_CHECK(what, cublasLtMatrixLayoutCreate(&desc.a, p.in_type, p.trans_a ? p.k : p.m,
                                                 p.trans_a ? p.m : p.k, p.lda));
  MT_CUDA_CHECK(what, cublasLtMatrixLayoutCreate(&desc.b, p.in_type, p.trans_b ? p.n : p.k,
                                                 p.trans_b ? p.k : p.n, p.ldb));
  MT_CUDA_CHECK(what, cublasLtMatrixLayoutCreate(&desc.d, p.out_type, p.m, p.n, p.ldd));
  MT_CUDA_CHECK(what, cublasLtMatmulPreferenceCreate(&desc.pref));
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_bytes), what);
  uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (p.out_type == CUDA_R_32F) schemes |= CUBLASLT_REDUCTION_SCHEME_INPLACE;
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes, what);
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(p.a), what);
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(p.b), what);
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(p.d), what);
  set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(p.d), what);
}

// What the heuristic's answer depends on: the same key always gets the same algorithm, so a product's bits do
// not depend on which call asked first.
using AlgoKey = std::array<int64_t, 17>;
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& key) const {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t field : key) h = (h ^ static_cast<uint64_t>(field)) * 0x100000001b3ull;
    return static_cast<size_t>(h);
  }
};

AlgoKey algo_key(cublasLtHandle_t lt, const LtProduct& p, int64_t workspace_bytes) {
  return {static_cast<int64_t>(reinterpret_cast<uintptr_t>(lt)),
          p.in_type,
          p.out_type,
          p.compute,
          p.trans_a,
          p.trans_b,
          p.m,
          p.n,
          p.k,
          p.lda,
          p.ldb,
          p.ldd,
          alignment_of(p.a),
          alignment_of(p.b),
          alignment_of(p.d),
          p.bias ? alignment_of(p.bias) : 0,
          workspace_bytes};
}

// The heuristic's best algorithm for the product, or none (cached either way).
std::optional<cublasLtMatmulAlgo_t> find_algo(cublasLtHandle_t lt, const LtProduct& p,
                                              const LtDescriptors& desc, int64_t workspace_bytes,
                                              const char* what) {
  static std::mutex mutex;
  static std::unordered_map<AlgoKey, std::optional<cublasLtMatmulAlgo_t>, AlgoKeyHash> cache;
  const AlgoKey key = algo_key(lt, p, workspace_bytes);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = cache.find(key); found != cache.end()) return found->second;
  cublasLtMatmulHeuristicResult_t result;
  std::memset(&result, 0, sizeof(result));
  int count = 0;
  MT_CUDA_CHECK(what, cublasLtMatmulAlgoGetHeuristic(lt, desc.op, desc.a, desc.b, desc.d, desc.d, desc.pref,
                                                     1, &result, &count));
  std::optional<cublasLtMatmulAlgo_t> algo;
  if (count > 0 && result.state == CUBLAS_STATUS_SUCCESS) algo = result.algo;
  cache.emplace(key, algo);
  return algo;
}

// Runs the product; false when cuBLASLt has no algorithm for it (only then).
bool run_product(cublasLtHandle_t lt, const LtProduct& p, void* workspace, int64_t workspace_bytes,
                 cudaStream_t stream, const char* what) {
  LtDescriptors desc;
  describe(desc, p, workspace_bytes, what);
  const std::optional<cublasLtMatmulAlgo_t> algo = find_algo(lt, p, desc, workspace_bytes, what);
  if (!algo) return false;
  const float alpha = 1.0f;
  MT_CUDA_CHECK(
      what, cublasLtMatmul(lt, desc.op, &alpha, p.a, desc.a, p.b, desc.b, &p.beta, p.d, desc.d, p.d, desc.d,
                           &*algo, workspace, static_cast<size_t>(workspace_bytes), stream));
  return true;
}

int grid_for(int64_t n, int threads) {
  return static_cast<int>(std::clamp<int64_t>((n + threads - 1) / threads, 1, 4096));
}

// C[M,N] (rows ldc apart) = beta * C (0 when beta is 0, whatever C holds) + bias[j] (bias may be null).
template <typename Out>
__global__ void scale_add_bias_kernel(Out* __restrict__ C, int64_t ldc, int64_t M, int64_t N, float beta,
                                      const Out* __restrict__ bias) {
  const int64_t total = M * N;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / N, j = e % N;
    Out* c = C + i * ldc + j;
    float v = beta == 0.0f ? 0.0f : beta * to_f32(*c);
    if (bias) v += to_f32(bias[j]);
    *c = round_to<Out>(v);
  }
}

template <typename Out>
void scale_add_bias(Out* C, int64_t ldc, int64_t M, int64_t N, float beta, const Out* bias,
                    cudaStream_t stream) {
  scale_add_bias_kernel<<<grid_for(M * N, 256), 256, 0, stream>>>(C, ldc, M, N, beta, bias);
  check_launch("gemm: scale_add_bias");
}

// Row-major C = op(A) @ op(B) + beta * C (+ bias[N]) as column-major C^T = op(B)^T @ op(A)^T.
template <typename In, typename Out>
void product(cublasLtHandle_t lt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const In* A,
             int64_t lda, const In* B, int64_t ldb, const Out* bias, float beta, Out* C, int64_t ldc,
             void* workspace, int64_t workspace_bytes, cudaStream_t stream, const char* what) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_add_bias(C, ldc, M, N, beta, bias, stream);
  const bool tf32 = std::is_same_v<In, float> && tf32_enabled();
  LtProduct p{.in_type = data_type<In>(),
              .out_type = data_type<Out>(),
              .compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
              .trans_a = trans_b,
              .trans_b = trans_a,
              .m = N,
              .n = M,
              .k = K,
              .a = B,
              .lda = ldb,
              .b = A,
              .ldb = lda,
              .d = C,
              .ldd = ldc,
              .bias = bias,
              .beta = beta};
  if (run_product(lt, p, workspace, workspace_bytes, stream, what)) return;
  if (!bias) throw std::runtime_error(std::string("cuda backend: ") + what + ": cuBLASLt has no algorithm");
  // No algorithm with the bias epilogue: the bias goes in first and the product lands on it.
  scale_add_bias(C, ldc, M, N, beta, bias, stream);
  p.bias = nullptr;
  p.beta = 1.0f;
  if (!run_product(lt, p, workspace, workspace_bytes, stream, what))
    throw std::runtime_error(std::string("cuda backend: ") + what + ": cuBLASLt has no algorithm");
}

// Column sums of dout[M, n] over row chunks of rows_per_chunk, each summed in row order: into
// partial[chunk, n], or (one chunk, partial null) added straight into dbias.
template <typename T, typename G>
__global__ void column_sums_kernel(const T* __restrict__ dout, int64_t M, int64_t n, int64_t rows_per_chunk,
                                   float* __restrict__ partial, G* __restrict__ dbias) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  const int64_t i0 = blockIdx.y * rows_per_chunk, i1 = min(M, i0 + rows_per_chunk);
  float sum = 0.0f;
  for (int64_t i = i0; i < i1; ++i) sum += to_f32(dout[i * n + j]);
  if (partial)
    partial[blockIdx.y * n + j] = sum;
  else
    dbias[j] = round_to<G>(to_f32(dbias[j]) + sum);
}

// dbias[j] += the chunks' partial sums, added in chunk order and rounded into G once.
template <typename G>
__global__ void add_partial_sums_kernel(G* __restrict__ dbias, const float* __restrict__ partial,
                                        int64_t chunks, int64_t n) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  float sum = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) sum += partial[c * n + j];
  dbias[j] = round_to<G>(to_f32(dbias[j]) + sum);
}

// dbias[n] += column sums of dout[M, n]. The chunking depends only on the shape and the workspace's size, so
// every run sums in the same order.
template <typename T, typename G>
void add_column_sums(G* dbias, const T* dout, int64_t M, int64_t n, float* workspace, int64_t workspace_bytes,
                     cudaStream_t stream) {
  if (M == 0 || n == 0) return;
  constexpr int64_t kMinChunkRows = 32, kMaxChunks = 65535;
  const int64_t fit = workspace ? workspace_bytes / (n * static_cast<int64_t>(sizeof(float))) : 0;
  int64_t chunks = std::min({(M + kMinChunkRows - 1) / kMinChunkRows, fit, kMaxChunks});
  if (chunks < 1) chunks = 1;
  const int64_t rows_per_chunk = (M + chunks - 1) / chunks;
  chunks = (M + rows_per_chunk - 1) / rows_per_chunk;
  constexpr int threads = 256;
  const dim3 grid(static_cast<unsigned>((n + threads - 1) / threads), static_cast<unsigned>(chunks));
  float* partial = chunks > 1 ? workspace : nullptr;
  column_sums_kernel<<<grid, threads, 0, stream>>>(dout, M, n, rows_per_chunk, partial, dbias);
  check_launch("linear_backward: column sums");
  if (!partial) return;
  add_partial_sums_kernel<<<grid.x, threads, 0, stream>>>(dbias, partial, chunks, n);
  check_launch("linear_backward: column sums");
}

}  // namespace

void set_tf32(bool enabled) {
  tf32_products.store(enabled);
}
bool tf32_enabled() {
  return tf32_products.load();
}

template <typename In, typename Out>
void gemm(cublasLtHandle_t lt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const In* A,
          int64_t lda, const In* B, int64_t ldb, float beta, Out* C, int64_t ldc, void* workspace,
          int64_t workspace_bytes, cudaStream_t stream) {
  // As on the CPU, whose libraries add a 16-bit product's C without scaling it.
  if (!std::is_same_v<In, float> && beta != 0.0f && beta != 1.0f)
    throw std::invalid_argument("16-bit gemm takes beta 0 or 1");
  product(lt, trans_a, trans_b, M, N, K, A, lda, B, ldb, static_cast<const Out*>(nullptr), beta, C, ldc,
          workspace, workspace_bytes, stream, "gemm");
}

template <typename T>
void linear_into(cublasLtHandle_t lt, T* out, int64_t ldc, const T* inp, const T* w, int64_t ldw,
                 bool trans_w, const T* bias, int64_t M, int64_t K, int64_t N, bool accumulate,
                 void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  product(lt, false, trans_w, M, N, K, inp, K, w, ldw, bias, accumulate ? 1.0f : 0.0f, out, ldc, workspace,
          workspace_bytes, stream, "linear_forward");
}

template <typename T>
void linear_forward(cublasLtHandle_t lt, T* out, const T* inp, const T* weight, const T* bias, int64_t M,
                    int64_t n_in, int64_t n_out, bool accumulate, float* workspace, int64_t workspace_bytes,
                    WeightLayout layout, cudaStream_t stream) {
  const bool out_in = layout == WeightLayout::out_in;
  linear_into(lt, out, n_out, inp, weight, out_in ? n_in : n_out, out_in, bias, M, n_in, n_out, accumulate,
              workspace, workspace_bytes, stream);
}

template <typename T, typename G>
void linear_backward(cublasLtHandle_t lt, T* dinp, G* dweight, G* dbias, const T* dout, const T* inp,
                     const T* weight, int64_t M, int64_t n_in, int64_t n_out, bool accumulate_dinp,
                     float* workspace, int64_t workspace_bytes, WeightLayout layout, cudaStream_t stream) {
  const bool out_in = layout == WeightLayout::out_in;
  if (dinp) {
    gemm(lt, false, !out_in, M, n_in, n_out, dout, n_out, weight, out_in ? n_in : n_out,
         accumulate_dinp ? 1.0f : 0.0f, dinp, n_in, workspace, workspace_bytes, stream);
  }
  if (dweight && out_in)
    gemm(lt, true, false, n_out, n_in, M, dout, n_out, inp, n_in, 1.0f, dweight, n_in, workspace,
         workspace_bytes, stream);
  else if (dweight)
    gemm(lt, true, false, n_in, n_out, M, inp, n_in, dout, n_out, 1.0f, dweight, n_out, workspace,
         workspace_bytes, stream);
  // After the products on the same stream, so the workspace is free for the partial sums.
  if (dbias) add_column_sums(dbias, dout, M, n_out, workspace, workspace_bytes, stream);
}

#define MT_GEMM(In, Out)                                                                                   \
  template void gemm<In, Out>(cublasLtHandle_t, bool, bool, int64_t, int64_t, int64_t, const In*, int64_t, \
                              const In*, int64_t, float, Out*, int64_t, void*, int64_t, cudaStream_t);
MT_GEMM(float, float)
MT_GEMM(bf16, float)
MT_GEMM(bf16, bf16)
MT_GEMM(f16, float)
MT_GEMM(f16, f16)
#undef MT_GEMM

#define MT_LINEAR_FORWARD(T)                                                                               \
  template void linear_into<T>(cublasLtHandle_t, T*, int64_t, const T*, const T*, int64_t, bool, const T*, \
                               int64_t, int64_t, int64_t, bool, void*, int64_t, cudaStream_t);             \
  template void linear_forward<T>(cublasLtHandle_t, T*, const T*, const T*, const T*, int64_t, int64_t,    \
                                  int64_t, bool, float*, int64_t, WeightLayout, cudaStream_t);
MT_LINEAR_FORWARD(float)
MT_LINEAR_FORWARD(bf16)
MT_LINEAR_FORWARD(f16)
#undef MT_LINEAR_FORWARD

#define MT_LINEAR_BACKWARD(T, G)                                                                           \
  template void linear_backward<T, G>(cublasLtHandle_t, T*, G*, G*, const T*, const T*, const T*, int64_t, \
                                      int64_t, int64_t, bool, float*, int64_t, WeightLayout, cudaStream_t);
MT_LINEAR_BACKWARD(float, float)
MT_LINEAR_BACKWARD(bf16, float)
MT_LINEAR_BACKWARD(bf16, bf16)
MT_LINEAR_BACKWARD(f16, float)
#undef MT_LINEAR_BACKWARD

}  // namespace mt::cuda
