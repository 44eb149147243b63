#include "forecast/calibrate.h"

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <type_traits>
#include <vector>

#include "backend/cpu/activation.h"
#include "backend/cpu/adamw.h"
#include "backend/cpu/adamw_8bit.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/layernorm.h"
#include "backend/cpu/lm_head.h"
#include "backend/cpu/matmul.h"
#include "backend/gpu.h"
#include "core/error.h"
#include "core/half.h"
#include "forecast/cpu_model.h"

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

// The representative weight of each class (forecast/hardware_profile.h): M rows by K = in, N = out.
struct GemmShape {
  int64_t M, N, K;
};
GemmShape representative_shape(ShapeClass c, int64_t rows) {
  switch (c) {
    case ShapeClass::small:
      return {rows, 384, 384};
    case ShapeClass::medium:
      return {rows, 768, 768};
    case ShapeClass::large:
      return {rows, 3072, 768};
  }
  return {0, 0, 0};
}

// Enough copies of a product's operands to pass through more memory than the caches hold: a step's
// products read weights and activations from memory, not from a warm cache.
int64_t cold_copies(int64_t bytes_per_copy) {
  return std::max<int64_t>(1, (int64_t{64} << 20) / std::max<int64_t>(bytes_per_copy, 1));
}

// The linear layer's kernels at a shape, on cold operands: seconds of the forward (one product, bias added)
// and of the backward (two products, the weight's gradient accumulated into fp32).
template <typename T>
std::pair<double, double> linear_seconds(GemmShape s, double budget) {
  const int64_t M = s.M, n_in = s.K, n_out = s.N;
  const int64_t n = cold_copies(static_cast<int64_t>(sizeof(T)) * (M * n_in + n_in * n_out + 2 * M * n_out) +
                                4 * n_in * n_out);
  const auto buffer = [n](int64_t elems, auto value) {
    return std::vector(static_cast<size_t>(n * elems), value);
  };
  std::vector<T> inp = buffer(M * n_in, T(0.5f)), weight = buffer(n_in * n_out, T(0.25f));
  std::vector<T> out = buffer(M * n_out, T(0.0f)), dout = buffer(M * n_out, T(0.01f));
  std::vector<T> dinp = buffer(M * n_in, T(0.0f)), bias(static_cast<size_t>(n_out), T(0.1f));
  std::vector<float> dweight = buffer(n_in * n_out, 0.0f), dbias(static_cast<size_t>(n_out));
  std::vector<float> scratch(static_cast<size_t>(kernels::gemm_scratch_floats(
      std::is_same_v<T, float> ? DType::f32 : DType::bf16, kernels::cpu_isa(), omp_get_max_threads())));
  int64_t i = 0;
  const double forward = best_seconds(budget, [&] {
    i = (i + 1) % n;
    kernels::linear_forward<T>(out.data() + i * M * n_out, inp.data() + i * M * n_in,
                               weight.data() + i * n_in * n_out, bias.data(), M, n_in, n_out, false,
                               scratch.data());
  });
  const double backward = best_seconds(budget, [&] {
    i = (i + 1) % n;
    kernels::linear_backward<T, float>(dinp.data() + i * M * n_in, dweight.data() + i * n_in * n_out,
                                       dbias.data(), dout.data() + i * M * n_out, inp.data() + i * M * n_in,
                                       weight.data() + i * n_in * n_out, M, n_in, n_out, false,
                                       scratch.data());
  });
  return {forward, backward};
}

// Each class's weight at each of kLinearRows: the forward's and the backward's FLOPs per second.
template <typename T>
LinearRates linear_rates(double budget) {
  LinearRates rates;
  for (ShapeClass c : kAllShapeClasses) {
    for (int i = 0; i < kNumLinearRows; ++i) {
      const GemmShape s = representative_shape(c, kLinearRows[i]);
      const auto [forward, backward] = linear_seconds<T>(s, budget);
      const double flops = 2.0 * static_cast<double>(s.M * s.N * s.K);
      rates.forward.gflops[static_cast<int>(c)][i] = flops / forward / 1e9;
      rates.backward.gflops[static_cast<int>(c)][i] = 2 * flops / backward / 1e9;
    }
  }
  return rates;
}

// The LM head with its loss in training over one chunk of GPT-2's (256 rows, C = 768, V = 50257): the three
// products' FLOPs per second.
template <typename T>
double lm_head_gflops(double budget) {
  const int64_t rows = 256, C = 768, V = 50257, Vp = 50304;
  std::vector<T> x(static_cast<size_t>(rows * C), T(0.01f)), wte(static_cast<size_t>(Vp * C), T(0.02f));
  std::vector<T> dx(static_cast<size_t>(rows * C)), dlogits(static_cast<size_t>(rows * Vp));
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % V);
  std::vector<float> logits(static_cast<size_t>(rows * Vp)), losses(static_cast<size_t>(rows));
  std::vector<float> dwte(static_cast<size_t>(Vp * C));
  std::vector<float> scratch(static_cast<size_t>(kernels::gemm_scratch_floats(
      std::is_same_v<T, float> ? DType::f32 : DType::bf16, kernels::cpu_isa(), omp_get_max_threads())));
  const double seconds = best_seconds(budget, [&] {
    kernels::lm_head_loss_chunk<T, float>({.x = x.data(),
                                           .wte = wte.data(),
                                           .targets = targets.data(),
                                           .logits = logits.data(),
                                           .dlogits = std::is_same_v<T, float> ? nullptr : dlogits.data(),
                                           .losses = losses.data(),
                                           .dx = dx.data(),
                                           .dwte = dwte.data(),
                                           .matmul_scratch = scratch.data(),
                                           .rows = rows,
                                           .C = C,
                                           .V = V,
                                           .Vp = Vp,
                                           .grad_scale = 1.0f / rows});
  });
  return 3 * 2.0 * static_cast<double>(rows * Vp * C) / seconds / 1e9;
}

// AdamW over arrays far larger than the caches, with an fp32 master and bf16 weights as mixed precision
// keeps them.
constexpr int64_t kAdamWParams = int64_t{16} << 20;
constexpr AdamWStep kAdamWStep{
    .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 1};

// Million parameters updated per second, with fp32 moments and gradients, or (O2) bf16 ones.
template <typename M>
double adamw_mparams(double budget) {
  const int64_t n = kAdamWParams;
  std::vector<float> master(static_cast<size_t>(n), 0.5f);
  std::vector<bf16> param(static_cast<size_t>(n));
  std::vector<M> grad(static_cast<size_t>(n), M(0.01f)), m(static_cast<size_t>(n), M(0.0f)),
      v(static_cast<size_t>(n), M(0.0f));
  const double seconds = best_seconds(budget, [&] {
    kernels::adamw_update<bf16, M, M>(master.data(), param.data(), grad.data(), m.data(), v.data(), n,
                                      kAdamWStep, {});
  });
  return static_cast<double>(n) / seconds / 1e6;
}

// The same with 8-bit block-quantized moments (adamw_8bit.h) and fp32 gradients, as a run given only
// --exp-avg-dtype and --exp-avg-sq-dtype holds them: the kernel is bound by its arithmetic, not by the bytes
// the gradients' dtype moves.
double adamw_8bit_mparams(MomentFormat format, double budget) {
  const int64_t n = kAdamWParams;
  const MomentCodec m_codec = first_moment_codec(format), v_codec = second_moment_codec(format);
  std::vector<float> master(static_cast<size_t>(n), 0.5f), grad(static_cast<size_t>(n), 0.01f);
  std::vector<bf16> param(static_cast<size_t>(n));
  std::vector<uint8_t> m(static_cast<size_t>(n), kernels::zero_code(m_codec)),
      v(static_cast<size_t>(n), kernels::zero_code(v_codec));
  std::vector<float> m_scales(static_cast<size_t>(moment_block_count(m_codec, n))),
      v_scales(static_cast<size_t>(moment_block_count(v_codec, n)));
  const std::vector<DecayRun> runs = {{.begin = 0, .decay = true}};
  const QuantizedMoments moments{format, m.data(), m_scales.data(), v.data(), v_scales.data()};
  const double seconds = best_seconds(budget, [&] {
    kernels::adamw_update_8bit<bf16, float>(master.data(), param.data(), grad.data(), moments, n, kAdamWStep,
                                            runs, {});
  });
  return static_cast<double>(n) / seconds / 1e6;
}

// The attention kernels' forward and backward at a GPT-2 layer's shape (B = 4, 12 heads of 64, T = 256):
// causal FLOPs (2 products forward, 5 backward over half the scores) per second.
template <typename T>
double attention_gflops(double budget) {
  const int64_t B = 4, Tn = 256, C = 768, NH = 12;
  const size_t rows = static_cast<size_t>(B * Tn);
  std::vector<T> qkv(rows * 3 * C), out(rows * C), dout(rows * C, T(0.01f)), dqkv(rows * 3 * C);
  // Varied scores, as a model's: equal ones make every softmax row flat.
  for (size_t i = 0; i < qkv.size(); ++i)
    qkv[i] = T(static_cast<float>(static_cast<int64_t>(i * 7919 % 201) - 100) / 100);
  std::vector<float> lse(rows * NH);
  std::vector<float> scratch(static_cast<size_t>(kernels::attention_scratch_floats(
      Tn, C / NH, omp_get_max_threads(), std::is_same_v<T, float> ? DType::f32 : DType::bf16)));
  const double seconds = best_seconds(budget, [&] {
    kernels::attention_forward<T>(out.data(), lse.data(), qkv.data(), nullptr, B, Tn, C, NH, NH,
                                  scratch.data());
    kernels::attention_backward<T>(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, B,
                                   Tn, C, NH, NH, scratch.data());
  });
  return 7.0 * static_cast<double>(B * Tn * Tn * C) / seconds / 1e9;
}

// The elementwise kernels at a GPT-2 layer's shape in bf16 (1024 rows of C = 768), forward then backward:
// million elements of the forward's output per second, each pass counted. They compute more than they move
// (GELU's tanh, a norm's two reductions per row), so they have rates of their own rather than the memory
// bandwidth's.
double norm_melems(double budget) {
  const int64_t N = 1024, C = 768;
  std::vector<bf16> inp(static_cast<size_t>(N * C), bf16(0.5f)), out(inp.size()), dinp(inp.size());
  std::vector<bf16> dout(inp.size(), bf16(0.01f)), weight(static_cast<size_t>(C), bf16(1.0f)), bias(weight);
  std::vector<float> mean(static_cast<size_t>(N)), rstd(mean.size()), dweight(static_cast<size_t>(C)),
      dbias(dweight.size());
  const double seconds = best_seconds(budget, [&] {
    kernels::layernorm_forward<bf16>(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                                     bias.data(), N, C, 1e-5f);
    kernels::layernorm_backward<bf16, float>(dinp.data(), dweight.data(), dbias.data(), dout.data(),
                                             inp.data(), weight.data(), mean.data(), rstd.data(), N, C);
  });
  return 2.0 * static_cast<double>(N * C) / seconds / 1e6;
}

double activation_melems(double budget) {
  const int64_t n = 1024 * 4 * 768;
  std::vector<bf16> inp(static_cast<size_t>(n), bf16(0.5f)), out(inp.size()), dinp(inp.size());
  std::vector<bf16> dout(inp.size(), bf16(0.01f));
  const double seconds = best_seconds(budget, [&] {
    kernels::gelu_forward<bf16>(out.data(), inp.data(), n);
    kernels::gelu_backward<bf16>(dinp.data(), inp.data(), dout.data(), n);
  });
  return 2.0 * static_cast<double>(n) / seconds / 1e6;
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

// Bus bandwidth of an all-reduce, bytes x 2(N-1)/N per second: what the cost model's ring volumes divide by;
// and the best time of one all-reduce of `data`.
std::pair<double, double> mpi_gbps(Communicator& comm, std::vector<float>& data, double budget) {
  const int64_t n = static_cast<int64_t>(data.size());
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
  return {4.0 * static_cast<double>(n) * 2.0 * (world - 1) / world / best / 1e9, best};
}

// How much of an exchange hides behind the kernels when both run at once, as training's overlapped exchanges
// do (the AsyncCommunicator's worker beside the compute threads): all-reduces of `data` on the worker beside
// bf16 products on this thread, against each alone. 1 - (both - products) / exchanges: 1 when the exchange
// is fully hidden, 0 when the two take as long as one after the other, below 0 when running together slows
// them more than that (the worker takes cores from the kernels, or they compete for memory).
double comm_overlap(AsyncCommunicator& comm, std::vector<float>& data, double exchange_seconds,
                    double budget) {
  const int64_t n = static_cast<int64_t>(data.size());
  // About `budget` of exchanges, the same count on every rank, and as long of products.
  double count = std::clamp(std::floor(budget / exchange_seconds), 2.0, 50.0);
  comm.broadcast(&count, 1, DType::f64, 0);
  const int64_t exchanges = static_cast<int64_t>(count);
  const GemmShape s = representative_shape(ShapeClass::medium, 1024);
  std::vector<bf16> a(static_cast<size_t>(s.M * s.K), bf16(0.5f)),
      b(static_cast<size_t>(s.K * s.N), bf16(0.25f));
  std::vector<bf16> c(static_cast<size_t>(s.M * s.N));
  // Below AVX-512 the bf16 products go through fp32 tiles.
  std::vector<float> scratch(static_cast<size_t>(
      kernels::gemm_scratch_floats(DType::bf16, kernels::cpu_isa(), omp_get_max_threads())));
  const auto product = [&] {
    kernels::linear_forward<bf16>(c.data(), a.data(), b.data(), nullptr, s.M, s.K, s.N, false,
                                  scratch.data());
  };
  product();
  Clock::time_point start = Clock::now();
  product();
  const int64_t products =
      std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(exchanges) * exchange_seconds /
                                                std::max(seconds_since(start), 1e-6)));
  double alone = 1e30, both = 1e30, exchanges_alone = 1e30;
  for (int r = 0; r < 3; ++r) {
    start = Clock::now();
    for (int64_t i = 0; i < products; ++i) product();
    alone = std::min(alone, seconds_since(start));
    comm.barrier();
    start = Clock::now();
    for (int64_t i = 0; i < exchanges; ++i) comm.all_reduce_sum(data.data(), n, DType::f32);
    exchanges_alone = std::min(exchanges_alone, seconds_since(start));
    comm.barrier();
    start = Clock::now();
    const AsyncCommunicator::Ticket ticket = comm.start([&](Communicator& inner) {
      for (int64_t i = 0; i < exchanges; ++i) inner.all_reduce_sum(data.data(), n, DType::f32);
    });
    for (int64_t i = 0; i < products; ++i) product();
    comm.wait(ticket);
    both = std::min(both, seconds_since(start));
  }
  // Both together cannot beat the products alone; a value above 1 is other jobs slowing the `alone` runs,
  // and a profile holds at most 1.
  return std::min(1.0, 1 - (both - alone) / exchanges_alone);
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

HardwareProfile calibrate(AsyncCommunicator& comm, const CalibrateOptions& options) {
  HardwareProfile p;
  p.source = "calibrate";
  p.cpu_isa = kernels::cpu_isa();
  p.threads = omp_get_max_threads();
  p.cpu_model = host_cpu_model();
  const double budget = options.seconds_per_test;
  p.fp32 = linear_rates<float>(budget);
  p.bf16 = linear_rates<bf16>(budget);
  p.attention_gflops = {attention_gflops<float>(budget), attention_gflops<bf16>(budget)};
  p.lm_head_gflops = {lm_head_gflops<float>(budget), lm_head_gflops<bf16>(budget)};
  p.adamw_mparams = {.fp32_moments = adamw_mparams<float>(budget),
                     .bf16_moments = adamw_mparams<bf16>(budget),
                     .fp8_moments = adamw_8bit_mparams(MomentFormat::fp8, budget),
                     .int8_moments = adamw_8bit_mparams(MomentFormat::int8, budget)};
  p.norm_melems = norm_melems(budget);
  p.activation_melems = activation_melems(budget);
  p.memory_gbps = memory_gbps(options.seconds_per_test);
  if (comm.size() > 1) {
    std::vector<float> data(size_t{4} << 20, 1.0f);  // 16 MiB of fp32
    const auto [gbps, seconds] = mpi_gbps(comm, data, budget);
    p.mpi_gbps = gbps;
    p.comm_overlap = comm_overlap(comm, data, seconds, budget);
  }
  p.disk_gbps = disk_gbps(options.scratch_dir);
  return p;
}

namespace {

// The --gpu name of a card: its driver's name in lower case, words joined by '-' ("nvidia-h100-80gb-hbm3").
std::string gpu_slug(const std::string& name) {
  std::string slug;
  for (const char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!slug.empty() && slug.back() != '-')
      slug += '-';
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug;
}

}  // namespace

GpuProfile calibrate_gpu(const DeviceTarget& target, int64_t runtime_overhead,
                         const CalibrateOptions& options) {
  const GpuRates rates = measure_gpu({.index = target.gpu}, options.seconds_per_test);
  return {.gpu = gpu_slug(rates.name),
          .name = rates.name,
          .source = "calibrate",
          .notes =
              "Measured by memtrain calibrate --device cuda: the runtime overhead with a run's backend open, "
              "large products through cuBLASLt (bf16, fp32 as TF32, fp32) and a device-to-device copy, "
              "each the best of repeats.",
          .memory_bytes = rates.total_bytes,
          .runtime_overhead_bytes = runtime_overhead,
          .bf16_tflops = rates.bf16_tflops,
          .tf32_tflops = rates.tf32_tflops,
          .fp32_tflops = rates.fp32_tflops,
          .memory_gbps = rates.memory_gbps};
}

}  // namespace mt
