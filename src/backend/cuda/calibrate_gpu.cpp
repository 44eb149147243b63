// `memtrain calibrate --device cuda`'s measurements of the GPU (backend/gpu.h measure_gpu): the products
// through the backend's own cuBLASLt path (matmul.cuh's gemm, with the planned workspace's size) and a copy
// between two device buffers, each timed with events on one stream.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/matmul.cuh"
#include "backend/gpu.h"
#include "core/half.h"

namespace mt {

namespace {

// The products' side: large enough for cuBLASLt's peak on an A100 or an H100 (8192^3 is 1.1 TFLOP, about a
// millisecond in bf16 on an H100), and its fp32 operands (256 MiB each) far past every cache, so the copy
// between two of them measures the memory itself.
constexpr int64_t kSide = 8192;
constexpr int64_t kOperandBytes = kSide * kSide * static_cast<int64_t>(sizeof(float));
// Every operand byte: the same nonzero value in fp32 (about 0.0115) and in bf16, as zeros would let the
// tensor cores idle at a lower power than a run's values do; a product of 8192 terms stays near 1.
constexpr int kFillByte = 0x3c;

// Device memory for the measurements, given back on every way out.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int64_t bytes) {
    MT_CUDA_CHECK("calibrate", cudaMalloc(&data_, static_cast<size_t>(bytes)));
    MT_CUDA_CHECK("calibrate", cudaMemset(data_, kFillByte, static_cast<size_t>(bytes)));
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

// The stream, cuBLASLt handle and events every measurement runs with.
class Session {
 public:
  Session() {
    MT_CUDA_CHECK("calibrate", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MT_CUDA_CHECK("calibrate", cublasLtCreate(&lt));
    MT_CUDA_CHECK("calibrate", cudaEventCreate(&start));
    MT_CUDA_CHECK("calibrate", cudaEventCreate(&stop));
  }
  ~Session() {  // errors are ignored: nothing in a destructor may throw
    if (stop) cudaEventDestroy(stop);
    if (start) cudaEventDestroy(start);
    if (lt) cublasLtDestroy(lt);
    if (stream) cudaStreamDestroy(stream);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The fastest of repeated runs of `work` on the stream (after one warm-up: cuBLASLt's heuristics, the
  // kernels' loading), repeated until about `budget` seconds passed, as the CPU's calibration does.
  template <typename Work>
  double best_seconds(double budget, Work&& work) {
    work();
    double best = 1e30, spent = 0;
    for (int runs = 0; runs < 3 || spent < budget; ++runs) {
      MT_CUDA_CHECK("calibrate", cudaEventRecord(start, stream));
      work();
      MT_CUDA_CHECK("calibrate", cudaEventRecord(stop, stream));
      MT_CUDA_CHECK("calibrate", cudaEventSynchronize(stop));
      float ms = 0;
      MT_CUDA_CHECK("calibrate", cudaEventElapsedTime(&ms, start, stop));
      best = std::min(best, ms / 1e3);
      spent += ms / 1e3;
    }
    return best;
  }

  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
};

struct Operands {
  DeviceBuffer a{kOperandBytes}, b{kOperandBytes}, c{kOperandBytes};
  // The planned workspace every product of a run takes (gpu_device_traits').
  int64_t workspace_bytes = gpu_device_traits(DType::bf16, 1, 1, "calibrate").matmul_scratch_floats *
                            static_cast<int64_t>(sizeof(float));
  DeviceBuffer workspace{workspace_bytes};
};

// C = A @ B of kSide^3 with In operands and an Out result, in TFLOP/s.
template <typename In, typename Out>
double product_tflops(Session& s, const Operands& o, double budget) {
  const double seconds = s.best_seconds(budget, [&] {
    cuda::gemm<In, Out>(s.lt, false, false, kSide, kSide, kSide, o.a.as<In>(), kSide, o.b.as<In>(), kSide,
                        0.0f, o.c.as<Out>(), kSide, o.workspace.as<void>(), o.workspace_bytes, s.stream);
  });
  return 2.0 * static_cast<double>(kSide) * kSide * kSide / seconds / 1e12;
}

// fp32 products as TF32, as set_tf32(true) makes a run's; the process's setting restored on every way out.
double tf32_tflops(Session& s, const Operands& o, double budget) {
  struct Tf32 {
    bool was = cuda::tf32_enabled();
    Tf32() { cuda::set_tf32(true); }
    ~Tf32() { cuda::set_tf32(was); }
  } on;
  return product_tflops<float, float>(s, o, budget);
}

}  // namespace

GpuRates measure_gpu(const GpuTarget& target, double seconds_per_test) {
  MT_CUDA_CHECK("calibrate", cudaSetDevice(target.index));
  cudaDeviceProp properties{};
  MT_CUDA_CHECK("calibrate", cudaGetDeviceProperties(&properties, target.index));
  size_t free_bytes = 0, total_bytes = 0;
  MT_CUDA_CHECK("calibrate", cudaMemGetInfo(&free_bytes, &total_bytes));
  Session session;
  const Operands operands;
  GpuRates rates;
  rates.name = properties.name;
  rates.total_bytes = static_cast<int64_t>(total_bytes);
  rates.bf16_tflops = product_tflops<bf16, bf16>(session, operands, seconds_per_test);
  rates.fp32_tflops = product_tflops<float, float>(session, operands, seconds_per_test);
  rates.tf32_tflops = tf32_tflops(session, operands, seconds_per_test);
  // A copy reads and writes each byte once.
  const double copy_s = session.best_seconds(seconds_per_test, [&] {
    MT_CUDA_CHECK("calibrate", cudaMemcpyAsync(operands.b.as<void>(), operands.a.as<void>(), kOperandBytes,
                                               cudaMemcpyDeviceToDevice, session.stream));
  });
  rates.memory_gbps = 2.0 * static_cast<double>(kOperandBytes) / copy_s / 1e9;
  return rates;
}

}  // namespace mt
