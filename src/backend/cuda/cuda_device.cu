// The GPU as a Device (memory/device.h): its allocators, the host's copies through one pinned staging
// buffer, and the host-facing kernels (convert, sum of squares, AdamW over fp32, bf16 and 8-bit moments) on
// the backend's one stream. What the GPU does not run yet (Adam-mini) is a logic error.
#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/weight_quant.h"
#include "backend/cuda/adamw.cuh"
#include "backend/cuda/adamw_8bit.cuh"
#include "backend/cuda/allocator.cuh"
#include "backend/cuda/convert.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/reduce.cuh"
#include "core/half.h"
#include "core/int_math.h"
#include "core/storage_type.h"
#include "core/weight_format.h"

namespace mt {

namespace {

// The pinned buffer that read() and write() stage their pieces through: a multiple of 64 bytes, so every
// piece starts where device.h promises.
constexpr int64_t kStagingBytes = int64_t{8} << 20;
static_assert(kStagingBytes % 64 == 0);

// Dispatches on a dtype's storage type, naming this device in its error.
template <bool kF16 = true, typename F>
void with_type(DType dtype, const char* what, F f) {
  with_storage_type<kF16>(dtype, "cuda device", what, f);
}

}  // namespace

// What the device holds besides its stream and cuBLASLt handle. The staging buffer and the reductions'
// scratch are outside the plan: 8 MiB of pinned host memory, 64 KiB + 256 bytes of device memory.
struct CudaDevice::Resources {
  explicit Resources(int device) : device_memory(device) {
    staging = static_cast<char*>(host_memory.allocate(kStagingBytes));
    MT_CUDA_CHECK("open", cudaMalloc(&squares, (cuda::kSquaresScratchDoubles + 1) * sizeof(double)));
  }
  ~Resources() {  // errors are ignored: nothing in a destructor may throw
    if (squares) cudaFree(squares);
    host_memory.release(staging, kStagingBytes);
  }
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;

  cuda::DeviceMemoryAllocator device_memory;
  cuda::PinnedHostAllocator host_memory;
  char* staging = nullptr;    // pinned, kStagingBytes
  double* squares = nullptr;  // device: cuda::kSquaresScratchDoubles partial sums, then the total
  std::string gpu_name;
  std::string sm;  // "90"
};

CudaDevice::CudaDevice(const GpuTarget& target) : target_(target) {
  try {
    MT_CUDA_CHECK("open", cudaSetDevice(target_.index));
    MT_CUDA_CHECK("open", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    MT_CUDA_CHECK("open", cublasLtCreate(&lt_));
    resources_ = std::make_unique<Resources>(target_.index);
    cuda::upload_dynamic_maps();  // the 8-bit moments' code tables
    cudaDeviceProp properties{};
    MT_CUDA_CHECK("open", cudaGetDeviceProperties(&properties, target_.index));
    resources_->gpu_name = properties.name;
    resources_->sm = std::to_string(properties.major) + std::to_string(properties.minor);
  } catch (...) {
    // No destructor runs for a constructor that throws: give back what was made.
    resources_.reset();
    if (lt_) cublasLtDestroy(lt_);
    if (stream_) cudaStreamDestroy(stream_);
    throw;
  }
}

// Never throws: errors met while tearing down are ignored.
CudaDevice::~CudaDevice() {
  if (stream_) cudaStreamSynchronize(stream_);
  resources_.reset();
  if (lt_) cublasLtDestroy(lt_);
  if (stream_) cudaStreamDestroy(stream_);
}

DeviceDescription CudaDevice::description() const {
  return {.name = "cuda",
          .banner = "cuda:" + std::to_string(target_.index) + " " + resources_->gpu_name + " | sm_" +
                    resources_->sm + " | matmul cublaslt",
          .fields = {{"gpu", resources_->gpu_name}, {"sm", resources_->sm}}};
}

// After the work queued so far: a buffer released or a kernel's workspace shows in the free bytes.
std::optional<DeviceMemoryInfo> CudaDevice::memory_info() {
  MT_CUDA_CHECK("memory_info", cudaStreamSynchronize(stream_));
  size_t free_bytes = 0, total_bytes = 0;
  MT_CUDA_CHECK("memory_info", cudaMemGetInfo(&free_bytes, &total_bytes));
  return DeviceMemoryInfo{.free_bytes = static_cast<int64_t>(free_bytes),
                          .total_bytes = static_cast<int64_t>(total_bytes)};
}

DeviceAllocator& CudaDevice::allocator(MemorySpace space) {
  if (space == MemorySpace::host) return resources_->host_memory;
  return resources_->device_memory;
}

// Copies between any two of device and pinned host memory: the runtime tells them apart (unified
// addressing), so a buffer of either memory space may be an operand.
void CudaDevice::zero(void* dst, int64_t bytes) {
  if (bytes > 0) MT_CUDA_CHECK("zero", cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), stream_));
}

void CudaDevice::copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0)
    MT_CUDA_CHECK("copy", cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream_));
}

// The host buffer may be reused (or freed) when this returns: wait for the copy.
void CudaDevice::copy_from_host(void* dst, const void* host, int64_t bytes) {
  if (bytes <= 0) return;
  MT_CUDA_CHECK("copy_from_host",
                cudaMemcpyAsync(dst, host, static_cast<size_t>(bytes), cudaMemcpyDefault, stream_));
  MT_CUDA_CHECK("copy_from_host", cudaStreamSynchronize(stream_));
}

void CudaDevice::copy_to_host(void* host, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  MT_CUDA_CHECK("copy_to_host",
                cudaMemcpyAsync(host, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream_));
  MT_CUDA_CHECK("copy_to_host", cudaStreamSynchronize(stream_));
}

void CudaDevice::read(const void* src, int64_t bytes, const HostReader& read) {
  char* staging = resources_->staging;
  for (int64_t offset = 0; offset < bytes; offset += kStagingBytes) {
    const int64_t piece = std::min(kStagingBytes, bytes - offset);
    MT_CUDA_CHECK("read", cudaMemcpyAsync(staging, static_cast<const char*>(src) + offset,
                                          static_cast<size_t>(piece), cudaMemcpyDefault, stream_));
    MT_CUDA_CHECK("read", cudaStreamSynchronize(stream_));
    read(staging, offset, piece);
  }
}

void CudaDevice::write(void* dst, int64_t bytes, const HostWriter& write) {
  char* staging = resources_->staging;
  for (int64_t offset = 0; offset < bytes; offset += kStagingBytes) {
    const int64_t piece = std::min(kStagingBytes, bytes - offset);
    write(staging, offset, piece);
    MT_CUDA_CHECK("write", cudaMemcpyAsync(static_cast<char*>(dst) + offset, staging,
                                           static_cast<size_t>(piece), cudaMemcpyDefault, stream_));
    MT_CUDA_CHECK("write",
                  cudaStreamSynchronize(stream_));  // before the next piece refills the staging buffer
  }
}

void CudaDevice::convert(void* dst, DType to, const void* src, DType from, int64_t n) {
  with_type(to, "convert into", [&](auto to_type) {
    using To = typename decltype(to_type)::type;
    with_type(from, "convert from", [&](auto from_type) {
      using From = typename decltype(from_type)::type;
      if constexpr (std::is_same_v<To, From>)
        copy(dst, src, n * static_cast<int64_t>(sizeof(To)));
      else
        cuda::convert(static_cast<To*>(dst), static_cast<const From*>(src), n, stream_);
    });
  });
}

double CudaDevice::sum_of_squares(const void* x, DType dtype, int64_t n) {
  double* total = resources_->squares + cuda::kSquaresScratchDoubles;
  with_type<false>(dtype, "sum of squares over", [&](auto type) {
    using G = typename decltype(type)::type;
    cuda::sum_of_squares(static_cast<const G*>(x), n, resources_->squares, total, stream_);
  });
  double sum = 0;
  MT_CUDA_CHECK("sum_of_squares",
                cudaMemcpyAsync(resources_->staging, total, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  MT_CUDA_CHECK("sum_of_squares", cudaStreamSynchronize(stream_));
  std::memcpy(&sum, resources_->staging, sizeof(double));
  return sum;
}

void CudaDevice::adamw_update(const AdamWOperands& p, void* m, void* v, DType moments, const AdamWStep& step,
                              const AdamWRounding& rounding) {
  with_type(p.weights_dtype, "AdamW over weights", [&](auto weights) {
    using P = typename decltype(weights)::type;
    with_type<false>(p.grads_dtype, "AdamW over gradients", [&](auto grads) {
      using G = typename decltype(grads)::type;
      with_type<false>(moments, "AdamW over moments", [&](auto moment) {
        using M = typename decltype(moment)::type;
        cuda::adamw_update(p.master, static_cast<P*>(p.weights), static_cast<const G*>(p.grads),
                           static_cast<M*>(m), static_cast<M*>(v), p.n, step, rounding, stream_);
      });
    });
  });
}

void CudaDevice::adam_mini_second_moments(const void*, DType, float*, const MiniBlockLayout&,
                                          const AdamWStep&) {
  throw std::logic_error("cuda backend: adam-mini is not on the GPU yet");
}

void CudaDevice::adam_mini_block_squares(const void*, DType, const MiniBlockLayout&, int64_t, int64_t, float,
                                         double*) {
  throw std::logic_error("cuda backend: adam-mini is not on the GPU yet");
}

void CudaDevice::adam_mini_second_moments_from_sums(float*, const double*, const MiniBlockLayout&,
                                                    const AdamWStep&) {
  throw std::logic_error("cuda backend: adam-mini is not on the GPU yet");
}

void CudaDevice::adam_mini_update(const AdamWOperands&, void*, DType, const float*, const MiniBlockLayout&,
                                  int64_t, const AdamWStep&, const AdamWRounding&) {
  throw std::logic_error("cuda backend: adam-mini is not on the GPU yet");
}

void CudaDevice::adam_mini_update_blocked(const AdamWOperands&, MomentFormat, uint8_t*, float*,
                                          std::span<const MiniTensor>, const AdamWStep&,
                                          const AdamWRounding&) {
  throw std::logic_error("cuda backend: adam-mini is not on the GPU yet");
}

void CudaDevice::adamw_update_blocked(const AdamWOperands& p, const QuantizedMoments& moments,
                                      const AdamWStep& step, std::span<const DecayRun> runs,
                                      const AdamWRounding& rounding) {
  with_type(p.weights_dtype, "AdamW over weights", [&](auto weights) {
    using P = typename decltype(weights)::type;
    with_type<false>(p.grads_dtype, "AdamW over gradients", [&](auto grads) {
      using G = typename decltype(grads)::type;
      cuda::adamw_update_8bit(p.master, static_cast<P*>(p.weights), static_cast<const G*>(p.grads), moments,
                              p.n, step, runs, rounding, stream_);
    });
  });
}

// Quantized on the host by the CPU's quantizer, once at load, so that every device stores the same bytes (the
// absmaxes' mean is one sum in index order), then each buffer uploaded.
void CudaDevice::quantize_weight(const float* host_values, const QuantizedWeight& into) {
  const bool double_quant = into.absmax == nullptr;
  const int64_t bytes = quantized_weight_bytes(into.format, into.n, double_quant);
  std::vector<float> buffer(static_cast<size_t>(bytes) / sizeof(float));  // the fp32 parts stay aligned
  const QuantizedWeight host = quantized_weight_at(into.format, into.n, double_quant, buffer.data());
  kernels::quantize_weight(host_values, host);
  const int64_t blocks = ceil_div(into.n, kWeightBlock), floats = static_cast<int64_t>(sizeof(float));
  copy_from_host(into.codes, host.codes, weight_code_bytes(into.format, into.n));
  if (!double_quant) return copy_from_host(into.absmax, host.absmax, blocks * floats);
  copy_from_host(into.absmax_codes, host.absmax_codes, blocks);
  copy_from_host(into.absmax_scales, host.absmax_scales, ceil_div(blocks, kAbsmaxBlock) * floats);
  copy_from_host(into.absmax_offset, host.absmax_offset, floats);
}

// A fault of an earlier kernel (or a failed launch nobody checked) is reported before a pass builds on it.
void CudaDevice::begin_pass(const Graph& /*graph*/) {
  MT_CUDA_CHECK("begin_pass", cudaPeekAtLastError());
}

}  // namespace mt
