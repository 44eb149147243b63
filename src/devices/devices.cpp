#include "devices/devices.h"

#include <charconv>

#include "backend/cpu/cpu_backend.h"
#include "backend/gpu.h"
#include "core/error.h"

namespace mt {

namespace {

CpuTarget cpu_target(const DeviceTarget& target) {
  return {.isa = target.cpu_isa, .threads = target.threads};
}

// "cuda", or "cuda:" and a GPU's index.
bool is_cuda_name(const std::string& device) {
  if (device == "cuda") return true;
  if (!device.starts_with("cuda:")) return false;
  int index = -1;
  const char* end = device.data() + device.size();
  const auto [ptr, ec] = std::from_chars(device.data() + 5, end, index);
  return ec == std::errc() && ptr == end && index >= 0;
}

}  // namespace

void init_devices() {
  init_cpu_backend();
}

CpuIsa process_cpu_isa() {
  return init_cpu_backend();
}

int process_threads() {
  return cpu_default_threads();
}

void check_device(const std::string& device) {
  if (device == "cpu") return;
  if (!is_cuda_name(device)) fail_usage("--device " + device + ": expected cpu, cuda or cuda:N");
  refuse_gpu("--device " + device);
}

DeviceTarget open_device(const std::string& device, int threads) {
  check_device(device);
  const CpuTarget cpu = open_cpu_backend(threads);
  return {.cpu_isa = cpu.isa, .threads = cpu.threads};
}

DeviceTraits device_traits(const DeviceTarget& target, DType dtype, int64_t seq_len, int64_t head_dim) {
  return cpu_device_traits(cpu_target(target), dtype, seq_len, head_dim);
}

std::unique_ptr<Backend> make_backend(const DeviceTarget& target, const ModelStatePolicy& policy) {
  return make_cpu_backend(cpu_target(target), policy);
}

}  // namespace mt
