// The GPU side of a build, for the room that chooses the device (devices/devices.h). A build with CUDA
// (MEMTRAIN_CUDA) links backend/cuda/, which finds the GPUs through the CUDA runtime and trains on one; a
// build without it links backend/no_cuda/, which knows no GPU and says so. Plain C++: no room above includes
// a CUDA header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "exec/backend.h"
#include "memory/device_traits.h"
#include "memory/plan.h"

namespace mt {

// The GPU a run trains on: its index among those the CUDA runtime sees.
struct GpuTarget {
  int index = 0;
  bool tf32 = false;  // fp32 products on TF32 tensor cores (--tf32)
};

// Whether this build has a GPU backend (MEMTRAIN_CUDA).
bool gpu_backend_built();
// The GPUs this process sees; 0 with `why` set when there are none (a build without CUDA, no driver, no
// device, a runtime error).
int gpu_count(std::string* why);
// Makes GPU `index` this process's device; a usage error naming `flag` when this build or machine has none.
GpuTarget open_gpu(int index, const std::string& flag);

// What GPU `index`'s driver says of its memory now (its context made if it was not): nothing without one.
std::optional<DeviceMemoryInfo> gpu_memory(int index);

// What a plan for the GPU needs for a run's shapes. It needs no GPU: `estimate --device cuda` plans on a
// machine without one. A usage error naming `flag` in a build without CUDA.
DeviceTraits gpu_device_traits(DType dtype, int64_t seq_len, int64_t head_dim, const std::string& flag);

// What `memtrain calibrate --device cuda` measures of target's GPU: the driver's name and total memory, the
// dense products' rates (cuBLASLt, as a run's: bf16, fp32 as TF32, fp32) and the device-to-device copy
// bandwidth, each the best of repeats filling about `seconds_per_test`. It allocates a few GiB of the GPU's
// memory and frees them.
struct GpuRates {
  std::string name;
  int64_t total_bytes = 0;
  double bf16_tflops = 0, tf32_tflops = 0, fp32_tflops = 0;
  double memory_gbps = 0;  // bytes read plus bytes written, 1e9 per second
};
GpuRates measure_gpu(const GpuTarget& target, double seconds_per_test);

// The backend for a run whose model states are laid out as `policy` says, on target's GPU.
std::unique_ptr<Backend> make_gpu_backend(const GpuTarget& target, const ModelStatePolicy& policy);

}  // namespace mt
