// The GPU side of a build with CUDA (backend/gpu.h): the GPUs the runtime sees, the traits a plan for one
// needs (constants of this backend: no GPU is asked), and the runner.
#include <cuda_runtime_api.h>

#include "backend/cuda/allocator.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/weight_quant.cuh"
#include "backend/gpu.h"
#include "core/error.h"

namespace mt {

namespace {

// Every packed tensor starts on 256 bytes, cudaMalloc's own alignment: vector loads and cuBLASLt's operands
// want 16 bytes, and 256 keeps a tensor's first element on a memory transaction's boundary.
constexpr int64_t kCudaAlignment = 256;
// cuBLASLt's workspace, handed to every product (a planned workspace tensor): 32 MiB, what NVIDIA recommends
// for Hopper (more than Ampere's 4 MiB).
constexpr int64_t kCublasLtWorkspaceBytes = int64_t{32} << 20;

}  // namespace

bool gpu_backend_built() {
  return true;
}

int gpu_count(std::string* why) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess) {
    if (why) *why = std::string("no GPU found: ") + cudaGetErrorString(status);
    return 0;
  }
  if (devices == 0 && why) *why = "no GPU found";
  return devices;
}

GpuTarget open_gpu(int index, const std::string& flag) {
  std::string why;
  const int devices = gpu_count(&why);
  if (devices == 0) fail_usage(flag + ": " + why);
  if (index >= devices)
    fail_usage(flag + ": there is no GPU " + std::to_string(index) + " (" + std::to_string(devices) +
               " found, numbered from 0)");
  MT_CUDA_CHECK("open", cudaSetDevice(index));
  return {.index = index};
}

std::optional<DeviceMemoryInfo> gpu_memory(int index) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaSetDevice(index) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // cleared: the caller goes on without the figure
    return std::nullopt;
  }
  return DeviceMemoryInfo{.free_bytes = static_cast<int64_t>(free_bytes),
                          .total_bytes = static_cast<int64_t>(total_bytes)};
}

DeviceTraits gpu_device_traits(DType /*dtype*/, int64_t /*seq_len*/, int64_t /*head_dim*/,
                               const std::string& /*flag*/) {
  // Attention needs no scratch: its backward recomputes each row's sum of dout * out inside the tiles. A
  // quantized base weight is dequantized kDequantTileColumns at a time (weight_quant.cuh says why so many).
  return {.alignment = kCudaAlignment,
          .host_memory = false,
          .matmul_scratch_floats = kCublasLtWorkspaceBytes / static_cast<int64_t>(sizeof(float)),
          .attention_scratch_floats = 0,
          .dequant_tile_columns = cuda::kDequantTileColumns,
          .commit_granularity = cuda::kDeviceGranularity};
}

std::unique_ptr<Backend> make_gpu_backend(const GpuTarget& target, const ModelStatePolicy& policy) {
  cuda::set_tf32(target.tf32);
  return make_cuda_runner(target, policy);
}

}  // namespace mt
