// Times the matrix products at GPT-2 124M's shapes (B*T = 1024 rows; the LM head one chunk of logit rows at a
// time) and prints GFLOP/s, the median of several repetitions. fp32 goes through both backends, each timed
// twice: alone, and right after an OpenMP kernel, as in training, where OpenMP's worker threads may still be
// spinning when the library's threads start. bf16 (oneDNN's matmul primitive) and f16 (fp32 tiles through
// the fp32 backend) are timed alone, with 16-bit outputs.
//   bench_matmul [threads=2] [repetitions=7]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "backend/cpu/convert.h"
#include "backend/cpu/matmul.h"
#include "model/gpt2.h"

namespace {

using mt::bf16;
using mt::f16;
using mt::kernels::GemmBackend;

struct Product {
  const char* name;
  bool trans_a, trans_b;
  int64_t M, N, K;
};

// The three products of a linear layer y[rows, n_out] = x[rows, n_in] @ W[n_in, n_out].
void add_linear(std::vector<Product>& products, const char* forward, const char* dinp, const char* dweight,
                int64_t rows, int64_t n_in, int64_t n_out) {
  products.push_back({forward, false, false, rows, n_out, n_in});
  products.push_back({dinp, false, true, rows, n_in, n_out});
  products.push_back({dweight, true, false, n_in, n_out, rows});
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// GFLOP/s of one product C = op(A) @ op(B), the median over `reps` runs (after one warm-up run).
template <typename In, typename Out>
double time_product(const Product& p, int reps, bool after_openmp, const std::vector<In>& a,
                    const std::vector<In>& b, std::vector<Out>& c) {
  const int64_t lda = p.trans_a ? p.M : p.K, ldb = p.trans_b ? p.K : p.N;
  std::vector<float> scratch(
      mt::kernels::gemm_scratch_floats(mt::dtype_of<In>(), mt::kernels::cpu_isa(), omp_get_max_threads()));
  std::vector<double> gflops;
  for (int r = 0; r <= reps; ++r) {
    if constexpr (std::is_same_v<Out, float>) {  // the 16-bit products are only timed alone
      if (after_openmp) mt::kernels::convert(c.data(), c.data(), p.M * p.N);
    }
    const auto start = std::chrono::steady_clock::now();
    mt::kernels::gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, a.data(), lda, b.data(), ldb, 0.0f, c.data(), p.N,
                      scratch.data());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) gflops.push_back(2.0 * p.M * p.N * p.K / seconds * 1e-9);
  }
  return median(gflops);
}

// The 16-bit product alone, on inputs of type T.
template <typename T>
double time_16bit(const Product& p, int reps) {
  const std::vector<T> a(p.M * p.K, mt::round_to<T>(0.01f)), b(p.K * p.N, mt::round_to<T>(0.02f));
  std::vector<T> c(p.M * p.N);
  return time_product(p, reps, false, a, b, c);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  omp_set_num_threads(threads);
  const GemmBackend trained = mt::kernels::gemm_backend();

  const int64_t rows = 1024, C = 768, V = 50304;
  std::vector<Product> products;
  add_linear(products, "qkv     x@W", "qkv     dout@W^T", "qkv     x^T@dout", rows, C, 3 * C);
  add_linear(products, "attproj x@W", "attproj dout@W^T", "attproj x^T@dout", rows, C, C);
  add_linear(products, "fc      x@W", "fc      dout@W^T", "fc      x^T@dout", rows, C, 4 * C);
  add_linear(products, "fcproj  x@W", "fcproj  dout@W^T", "fcproj  x^T@dout", rows, 4 * C, C);
  // The tied LM head: logits = x @ wte^T, dx = dlogits @ wte, dwte = dlogits^T @ x.
  const int64_t chunk = mt::kLogitsChunkRows;
  products.push_back({"lmhead  x@wte^T", false, true, chunk, V, C});
  products.push_back({"lmhead  dl@wte", false, false, chunk, C, V});
  products.push_back({"lmhead  dl^T@x", true, false, V, C, chunk});

  std::printf("threads %d, median of %d; fp32 GFLOP/s alone | right after an OpenMP kernel\n", threads, reps);
  std::printf("%-18s %6s %6s %6s  %15s  %15s  %6s  %6s\n", "product", "M", "N", "K", "fp32 onednn",
              "fp32 openblas", "bf16", "f16");
  for (const Product& p : products) {
    std::vector<float> a(p.M * p.K, 0.01f), b(p.K * p.N, 0.02f), c(p.M * p.N);
    std::printf("%-18s %6ld %6ld %6ld", p.name, p.M, p.N, p.K);
    for (GemmBackend backend : {GemmBackend::onednn, GemmBackend::openblas}) {
      mt::kernels::set_gemm_backend(backend);
      const double alone = time_product(p, reps, false, a, b, c);
      const double mixed = time_product(p, reps, true, a, b, c);
      std::printf("  %6.1f | %6.1f", alone, mixed);
    }
    mt::kernels::set_gemm_backend(trained);  // f16 runs on the fp32 backend training uses
    std::printf("  %6.1f  %6.1f\n", time_16bit<bf16>(p, reps), time_16bit<f16>(p, reps));
    std::fflush(stdout);
  }
}
