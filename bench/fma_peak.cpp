// The machine's peak rate of fp32 multiply-adds, the denominator of bench_gpt2.sh's MFU: every thread runs 12
// independent chains of vector multiply-adds in registers (more than latency x pipes of any x86 core so far,
// so the pipes never wait), touching no memory; the rate is the best of a few runs of about --seconds each.
//   fma_peak [--threads N] [--isa LEVEL] [--seconds S] [--repeats R]
// LEVEL is one of memtrain's (backend/cpu/cpu_isa.h), default the one memtrain runs at (the widest this CPU
// has, capped by MEMTRAIN_MAX_ISA), and picks the instructions:
//   generic      128-bit mulps then addps: x86-64-v2 has no FMA, so this is what products there can reach
//   avx2         256-bit vfmadd (x86-64-v3)
//   avx512       512-bit vfmadd (x86-64-v4)
//   avx512_bf16  as avx512, and also the rate of 512-bit vdpbf16ps ("bf16_gflops": 2 bf16 multiply-adds per
//                fp32 lane), the ceiling of oneDNN's bf16 products there
// Prints one JSON object: the level, threads, the best rate in GFLOP/s and every run's.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace {

using mt::CpuIsa;

constexpr int kChains = 12;

// Each kernel runs `iterations` rounds of one multiply-add per chain and returns a sum of the chains, so that
// none of them is dead code. The FMA chains run acc * 0.999 + 0.001, which converges to 1: no overflow, no
// subnormals.

// As a product without FMA runs: acc += x * y, the multiply off the chain (so only the add's latency is on
// it). acc grows by 2^-20 a round, far from overflow in any run this short.
float generic_kernel(int64_t iterations) {
  __m128 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm_set1_ps(static_cast<float>(i));
  __m128 x = _mm_set1_ps(1.0f);
  const __m128 y = _mm_set1_ps(0x1p-20f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) {
      // x "changes" before every multiply, so none is hoisted out of the loop or shared between chains; the
      // product "changes" before the add, so the two are not fused into an FMA where this file's flags allow
      // one.
      asm volatile("" : "+x"(x));
      __m128 product = _mm_mul_ps(x, y);
      asm volatile("" : "+x"(product));
      acc[i] = _mm_add_ps(acc[i], product);
    }
  __m128 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm_add_ps(sum, acc[i]);
  return _mm_cvtss_f32(sum);
}

__attribute__((target("avx2,fma"))) float avx2_kernel(int64_t iterations) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  return _mm256_cvtss_f32(sum);
}

__attribute__((target("avx512f"))) float avx512_kernel(int64_t iterations) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_cvtss_f32(sum);
}

// acc += x0 * y0 + x1 * y1 per fp32 lane, with x = 1 and y = 2^-20 in bf16: acc grows by 2^-19 a round, far
// from overflow in any run this short.
__attribute__((target("avx512f,avx512bf16"))) float bf16_kernel(int64_t iterations) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3580);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  __m512 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  return _mm512_cvtss_f32(sum);
}

struct Kernel {
  float (*run)(int64_t iterations);
  double flops_per_iteration;  // per thread: chains x lanes x 2 (x 2 more for the bf16 pairs)
};

// Where the kernels' sums go, so that the compiler cannot drop them.
volatile float sink;

// Seconds for every thread to run `iterations` rounds of the kernel at once.
double time_kernel(const Kernel& kernel, int threads, int64_t iterations) {
  float sum = 0.0f;
  const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
  sum += kernel.run(iterations);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  sink = sum;
  return seconds;
}

// GFLOP/s of each of `repeats` runs of about `seconds`, after doubling runs that size them (and wake the
// threads and let the clock ramp up).
std::vector<double> measure(const Kernel& kernel, int threads, double seconds, int repeats) {
  int64_t iterations = 1 << 16;
  double t = 0.0;
  while ((t = time_kernel(kernel, threads, iterations)) < 0.2 * seconds) iterations *= 2;
  iterations = static_cast<int64_t>(iterations * seconds / t);
  std::vector<double> gflops;
  for (int r = 0; r < repeats; ++r)
    gflops.push_back(kernel.flops_per_iteration * threads * iterations /
                     time_kernel(kernel, threads, iterations) * 1e-9);
  return gflops;
}

Kernel fp32_kernel(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::generic:
      return {generic_kernel, kChains * 4 * 2.0};
    case CpuIsa::avx2:
      return {avx2_kernel, kChains * 8 * 2.0};
    case CpuIsa::avx512:
    case CpuIsa::avx512_bf16:
      break;
  }
  return {avx512_kernel, kChains * 16 * 2.0};
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> options = {
      {"--threads", std::to_string(omp_get_max_threads())},
      {"--isa", std::string(mt::cpu_isa_name(mt::kernels::cpu_isa()))},
      {"--seconds", "0.5"},
      {"--repeats", "5"}};
  bool known = argc % 2 == 1;
  for (int i = 1; known && i + 1 < argc; i += 2) {
    const auto option = options.find(argv[i]);
    known = option != options.end();
    if (known) option->second = argv[i + 1];
  }
  const std::optional<CpuIsa> isa = mt::parse_cpu_isa(options["--isa"]);
  if (!known || !isa) {
    std::fprintf(stderr,
                 "usage: fma_peak [--threads N] [--isa LEVEL] [--seconds S] [--repeats R], LEVEL %s\n",
                 mt::cpu_isa_choices().c_str());
    return 2;
  }
  if (*isa > mt::kernels::cpu_isa_supported()) {
    std::fprintf(stderr, "fma_peak: --isa %s is above this CPU's %s\n", options["--isa"].c_str(),
                 std::string(mt::cpu_isa_name(mt::kernels::cpu_isa_supported())).c_str());
    return 2;
  }
  const int threads = std::stoi(options["--threads"]), repeats = std::stoi(options["--repeats"]);
  const double seconds = std::stod(options["--seconds"]);

  const std::vector<double> runs = measure(fp32_kernel(*isa), threads, seconds, repeats);
  nlohmann::json out = {{"isa", options["--isa"]},
                        {"threads", threads},
                        {"gflops", *std::max_element(runs.begin(), runs.end())},
                        {"gflops_runs", runs}};
  if (*isa == CpuIsa::avx512_bf16) {
    const std::vector<double> bf16 = measure({bf16_kernel, kChains * 16 * 4.0}, threads, seconds, repeats);
    out["bf16_gflops"] = *std::max_element(bf16.begin(), bf16.end());
    out["bf16_gflops_runs"] = bf16;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

#else

int main() {
  std::fprintf(stderr, "fma_peak: x86-64 only\n");
  return 1;
}

#endif
