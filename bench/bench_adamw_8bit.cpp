// Times one AdamW step over n parameters for each way of storing the moments: fp32, bf16 (O2), int8 and fp8
// (8-bit blocks, adamw_8bit.h), with bf16 weights, an fp32 master and bf16 gradients (the O2 layout), plus
// the all-fp32 layout for reference. Prints milliseconds per step, the median of several, and million
// parameter updates per second.
//   bench_adamw_8bit [threads=2] [repetitions=7] [n=33554432]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/adamw.h"
#include "backend/cpu/adamw_8bit.h"
#include "backend/cpu/cpu_isa.h"

namespace {

using namespace mt;
using namespace mt::kernels;

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// The median milliseconds of `reps` calls of step(t), after one that warms caches and page-faults buffers.
template <typename F>
double time_steps(int reps, const F& step) {
  std::vector<double> ms;
  for (int r = 0; r <= reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    step(r + 1);
    const double elapsed =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) ms.push_back(elapsed);
  }
  return median(ms);
}

void report(const char* layout, int64_t n, double ms) {
  std::printf("%-34s %9.2f ms %9.1f Mupd/s\n", layout, ms, n / ms * 1e-3);
}

// Gradients of GPT-2's order of magnitude; the kernels' speed hardly depends on them.
template <typename G>
std::vector<G> gradients(int64_t n) {
  std::vector<G> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = round_to<G>(static_cast<float>((i * 7919 % 2001) - 1000) * 1e-6f);
  return g;
}

AdamWStep step_at(int64_t t) {
  return {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t};
}

template <typename M>
void run_16bit_or_fp32_moments(const char* layout, int reps, int64_t n) {
  std::vector<float> master(n, 0.01f);
  std::vector<bf16> param(n, round_to<bf16>(0.01f));
  const std::vector<bf16> grad = gradients<bf16>(n);
  std::vector<M> m(n, round_to<M>(0.0f)), v(n, round_to<M>(0.0f));
  report(layout, n, time_steps(reps, [&](int64_t t) {
           adamw_update<bf16, bf16, M>(master.data(), param.data(), grad.data(), m.data(), v.data(), n,
                                       step_at(t), {});
         }));
}

void run_8bit_moments(const char* layout, MomentFormat f, int reps, int64_t n) {
  std::vector<float> master(n, 0.01f);
  std::vector<bf16> param(n, round_to<bf16>(0.01f));
  const std::vector<bf16> grad = gradients<bf16>(n);
  const MomentCodec mc = first_moment_codec(f), vc = second_moment_codec(f);
  std::vector<uint8_t> m(n, zero_code(mc)), v(n, zero_code(vc));
  std::vector<float> m_scales(moment_block_count(mc, n)), v_scales(moment_block_count(vc, n));
  const std::vector<DecayRun> runs = {{0, true}};
  report(layout, n, time_steps(reps, [&](int64_t t) {
           adamw_update_8bit<bf16, bf16>(master.data(), param.data(), grad.data(),
                                         {f, m.data(), m_scales.data(), v.data(), v_scales.data()}, n,
                                         step_at(t), runs, {});
         }));
}

void run_fp32(int reps, int64_t n) {
  std::vector<float> param(n, 0.01f), m(n), v(n);
  const std::vector<float> grad = gradients<float>(n);
  report("fp32 weights, grads, moments", n, time_steps(reps, [&](int64_t t) {
           adamw_update<float, float, float>(nullptr, param.data(), grad.data(), m.data(), v.data(), n,
                                             step_at(t), {});
         }));
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  const int64_t n = argc > 3 ? std::atoll(argv[3]) : int64_t{1} << 25;
  omp_set_num_threads(threads);
  std::printf("AdamW over %lld parameters, %d threads, ISA level %s, median of %d steps\n",
              static_cast<long long>(n), threads, std::string(cpu_isa_name(cpu_isa())).c_str(), reps);
  run_fp32(reps, n);
  run_16bit_or_fp32_moments<float>("bf16 + master, moments fp32", reps, n);
  run_16bit_or_fp32_moments<bf16>("bf16 + master, moments bf16", reps, n);
  run_8bit_moments("bf16 + master, moments int8", MomentFormat::int8, reps, n);
  run_8bit_moments("bf16 + master, moments fp8", MomentFormat::fp8, reps, n);
  return 0;
}
