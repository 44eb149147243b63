#include "plan/calibrate.h"

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"

namespace mt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The fastest of repeated runs of `work` (after one warm-up), repeated until about `budget` seconds passed:
// other jobs on a shared machine only ever slow a run down.
template <typename Work>
double best_seconds(double budget, Work&& work) {
  work();
  double best = 1e30, spent = 0;
  int runs = 0;
  while (runs < 3 || spent < budget) {
    const Clock::time_point start = Clock::now();
    work();
    const double s = seconds_since(start);
    best = std::min(best, s);
    spent += s;
    ++runs;
  }
  return best;
}

// The representative M, N, K of each shape class (plan/hardware_profile.h's shape_class puts each in its
// own): an attention-sized product, a GPT-2 small layer's, and a large model's.
struct GemmShape {
  int64_t M, N, K;
};
GemmShape representative_shape(ShapeClass c) {
  switch (c) {
    case ShapeClass::small:
      return {256, 384, 384};
    case ShapeClass::medium:
      return {1024, 768, 768};
    case ShapeClass::large:
      return {2048, 3072, 768};
  }
  return {0, 0, 0};
}

template <typename T>
double gemm_gflops(GemmShape s, double budget) {
  std::vector<T> a(static_cast<size_t>(s.M * s.K), T(0.5f)), b(static_cast<size_t>(s.K * s.N), T(0.25f));
  std::vector<float> c(static_cast<size_t>(s.M * s.N));
  std::vector<float> scratch(
      static_cast<size_t>(kernels::gemm_scratch_floats(std::is_same_v<T, float> ? DType::f32 : DType::bf16)));
  const double seconds = best_seconds(budget, [&] {
    kernels::gemm<T, float>(false, false, s.M, s.N, s.K, a.data(), s.K, b.data(), s.N, 0.0f, c.data(), s.N,
                            scratch.data());
  });
  return 2.0 * static_cast<double>(s.M * s.N * s.K) / seconds / 1e9;
}

// The attention kernels' forward and backward at a GPT-2 layer's shape (12 heads of 64, T = 256): causal
// FLOPs (2 products forward, 5 backward over half the scores) per second.
template <typename T>
double attention_gflops(double budget) {
  const int64_t B = 1, Tn = 256, C = 768, NH = 12;
  const size_t rows = static_cast<size_t>(B * Tn);
  std::vector<T> qkv(rows * 3 * C, T(0.01f)), out(rows * C), dout(rows * C, T(0.01f)), dqkv(rows * 3 * C);
  std::vector<float> lse(rows * NH);
  std::vector<float> scratch(static_cast<size_t>(kernels::attention_scratch_floats(
      Tn, C / NH, omp_get_max_threads(), std::is_same_v<T, float> ? DType::f32 : DType::bf16)));
  const double seconds = best_seconds(budget, [&] {
    kernels::attention_forward<T>(out.data(), lse.data(), qkv.data(), B, Tn, C, NH, NH, scratch.data());
    kernels::attention_backward<T>(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, Tn, C, NH,
                                   NH, scratch.data());
  });
  return 7.0 * static_cast<double>(B * Tn * Tn * C) / seconds / 1e9;
}

// A scaled add over arrays far larger than the caches, on all threads, as the elementwise kernels run:
// bytes read and written per second.
double memory_gbps(double budget) {
  const int64_t n = int64_t{32} << 20;  // 128 MiB per array
  std::vector<float> x(static_cast<size_t>(n), 1.0f), y(static_cast<size_t>(n), 2.0f);
  const double seconds = best_seconds(budget, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] + 0.5f * x[i];
  });
  return 3.0 * 4.0 * static_cast<double>(n) / seconds / 1e9;  // x read, y read and written
}

// Bus bandwidth of an all-reduce, bytes x 2(N-1)/N per second: what the cost model's ring volumes divide by.
std::optional<double> mpi_gbps(Communicator& comm, double budget) {
  if (comm.size() < 2) return std::nullopt;
  const int64_t n = int64_t{4} << 20;  // 16 MiB of fp32
  std::vector<float> data(static_cast<size_t>(n), 1.0f);
  // Every rank runs the same number of collectives: rank 0's count goes to everyone first.
  const Clock::time_point start = Clock::now();
  comm.all_reduce_sum(data.data(), n, DType::f32);
  double one = seconds_since(start);
  comm.broadcast(&one, 1, DType::f64, 0);
  const int64_t repeats = std::clamp<int64_t>(static_cast<int64_t>(budget / std::max(one, 1e-6)), 3, 50);
  double best = 1e30;
  for (int64_t r = 0; r < repeats; ++r) {
    comm.barrier();
    const Clock::time_point t = Clock::now();
    comm.all_reduce_sum(data.data(), n, DType::f32);
    best = std::min(best, seconds_since(t));
  }
  const double world = comm.size();
  return 4.0 * static_cast<double>(n) * 2.0 * (world - 1) / world / best / 1e9;
}

// Writes a file the size of a large model's optimizer chunk stream under `dir` with fsync and reads it back,
// as the offload's I/O thread does: bytes written and read per second.
double disk_gbps(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) fail_usage("--scratch-dir " + dir + ": not a directory");
  const std::string path = dir + "/memtrain-calibrate." + std::to_string(::getpid()) + ".bin";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) fail_data("--scratch-dir " + dir + ": cannot create a file there");
  const size_t chunk = size_t{4} << 20, chunks = 64;  // 256 MiB in the offload's 4 MiB chunks
  std::vector<char> buffer(chunk, 1);
  bool ok = true;
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < chunks && ok; ++i)
    ok = ::pwrite(fd, buffer.data(), chunk, static_cast<off_t>(i * chunk)) == static_cast<ssize_t>(chunk);
  ok = ok && ::fsync(fd) == 0;
  for (size_t i = 0; i < chunks && ok; ++i)
    ok = ::pread(fd, buffer.data(), chunk, static_cast<off_t>(i * chunk)) == static_cast<ssize_t>(chunk);
  const double seconds = seconds_since(start);
  ::close(fd);
  std::filesystem::remove(path);
  if (!ok) fail_data("--scratch-dir " + dir + ": writing or reading the test file failed");
  return 2.0 * static_cast<double>(chunk * chunks) / seconds / 1e9;
}

}  // namespace

HardwareProfile calibrate(Communicator& comm, const CalibrateOptions& options) {
  HardwareProfile p;
  p.source = "calibrate";
  p.threads = omp_get_max_threads();
  for (ShapeClass c : kAllShapeClasses) {
    p.fp32[c] = gemm_gflops<float>(representative_shape(c), options.seconds_per_test);
    p.bf16[c] = gemm_gflops<bf16>(representative_shape(c), options.seconds_per_test);
  }
  p.attention_gflops = {attention_gflops<float>(options.seconds_per_test),
                        attention_gflops<bf16>(options.seconds_per_test)};
  p.memory_gbps = memory_gbps(options.seconds_per_test);
  p.mpi_gbps = mpi_gbps(comm, options.seconds_per_test);
  p.disk_gbps = disk_gbps(options.scratch_dir);
  return p;
}

}  // namespace mt
