// The GPU side of a build without CUDA (MEMTRAIN_CUDA off): it knows no GPU.
#include <stdexcept>

#include "backend/gpu.h"
#include "core/error.h"

namespace mt {

namespace {

constexpr const char* kWithout = "this memtrain was built without CUDA (MEMTRAIN_CUDA off)";

}  // namespace

bool gpu_backend_built() {
  return false;
}

int gpu_count(std::string* why) {
  if (why) *why = kWithout;
  return 0;
}

std::optional<DeviceMemoryInfo> gpu_memory(int /*index*/) {
  return std::nullopt;
}

GpuTarget open_gpu(int /*index*/, const std::string& flag) {
  fail_usage(flag + ": " + kWithout);
}

DeviceTraits gpu_device_traits(DType /*dtype*/, int64_t /*seq_len*/, int64_t /*head_dim*/,
                               const std::string& flag) {
  fail_usage(flag + ": " + kWithout);
}

// Unreachable: open_gpu has refused first.
GpuRates measure_gpu(const GpuTarget& /*target*/, double /*seconds_per_test*/) {
  throw std::logic_error(std::string("measure_gpu: ") + kWithout);
}

std::unique_ptr<Backend> make_gpu_backend(const GpuTarget& /*target*/, const ModelStatePolicy& /*policy*/) {
  throw std::logic_error(std::string("gpu backend: ") + kWithout);
}

}  // namespace mt
