// Times attention_forward and attention_backward at GPT-2 124M's head shape (C = 768, NH = 12) for each
// storage type and prints milliseconds and GFLOP/s, the median of several repetitions. The FLOPs counted are
// those of the causal products alone (2 in forward, 5 in backward: S is recomputed), each 2*T*(T+1)/2*hs per
// (batch, head), so the rate is comparable with bench_matmul's.
//   bench_attention [threads=2] [repetitions=7] [B=4] [T=256] [only=fp32|bf16|f16]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"

namespace {

constexpr int64_t C = 768, NH = 12;

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

template <typename F>
double milliseconds(const F& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

template <typename T>
void run(const char* name, int reps, int64_t B, int64_t T_len) {
  const int64_t n_qkv = B * T_len * 3 * C, n_out = B * T_len * C;
  std::vector<T> qkv(n_qkv), out(n_out), dout(n_out), dqkv(n_qkv);
  // Deterministic values of GPT-2's order of magnitude; the kernels' speed does not depend on them.
  for (int64_t i = 0; i < n_qkv; ++i)
    qkv[i] = mt::round_to<T>(static_cast<float>((i * 7919 % 2001) - 1000) * 1e-3f);
  for (int64_t i = 0; i < n_out; ++i)
    dout[i] = mt::round_to<T>(static_cast<float>((i * 104729 % 2001) - 1000) * 1e-5f);
  std::vector<float> lse(B * NH * T_len);
  std::vector<float> scratch(
      mt::kernels::attention_scratch_floats(T_len, C / NH, omp_get_max_threads(), mt::dtype_of<T>()));
  std::vector<double> fwd, bwd;
  for (int r = 0; r <= reps; ++r) {
    const double f = milliseconds([&] {
      mt::kernels::attention_forward(out.data(), lse.data(), qkv.data(), nullptr, B, T_len, C, NH, NH,
                                     scratch.data());
    });
    const double b = milliseconds([&] {
      mt::kernels::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr,
                                      B, T_len, C, NH, NH, scratch.data());
    });
    if (r > 0) {  // the first run warms caches and page-faults the buffers
      fwd.push_back(f);
      bwd.push_back(b);
    }
  }
  const double product_gflop = 2.0 * T_len * (T_len + 1) / 2 * (C / NH) * B * NH * 1e-9;
  const double f = median(fwd), b = median(bwd);
  std::printf("%-5s B=%lld T=%-5lld forward %8.2f ms %6.1f GFLOP/s   backward %8.2f ms %6.1f GFLOP/s\n", name,
              static_cast<long long>(B), static_cast<long long>(T_len), f, 2 * product_gflop / f * 1e3, b,
              5 * product_gflop / b * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  const int64_t B = argc > 3 ? std::atoll(argv[3]) : 4, T_len = argc > 4 ? std::atoll(argv[4]) : 256;
  omp_set_num_threads(threads);
  const std::string only = argc > 5 ? argv[5] : "";
  if (only.empty() || only == "fp32") run<float>("fp32", reps, B, T_len);
  if (only.empty() || only == "bf16") run<mt::bf16>("bf16", reps, B, T_len);
  if (only.empty() || only == "f16") run<mt::f16>("f16", reps, B, T_len);
}
