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

// The GPU a checked cuda name gives: N of "cuda:N", 0 of "cuda".
int gpu_index(const std::string& device) {
  return device == "cuda" ? 0 : std::stoi(device.substr(5));
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
  if (!gpu_backend_built()) open_gpu(0, "--device " + device);  // says why
}

DeviceKind device_kind(const std::string& device) {
  check_device(device);
  return device == "cpu" ? DeviceKind::cpu : DeviceKind::cuda;
}

void check_device_ranks(const std::string& device, int64_t ranks) {
  if (device_kind(device) == DeviceKind::cuda && ranks > 1)
    fail_usage("--device " + device + " with " + std::to_string(ranks) +
               " ranks: memtrain trains on one GPU from one process; several GPUs (NCCL) are not there yet");
}

DeviceTarget plan_target(const std::string& device, CpuIsa isa, int threads) {
  if (device_kind(device) == DeviceKind::cpu) return {.cpu_isa = isa, .threads = threads};
  return {.kind = DeviceKind::cuda, .cpu_isa = isa, .threads = threads, .gpu = gpu_index(device)};
}

DeviceTarget open_device(const std::string& device, int threads, bool tf32) {
  const DeviceKind kind = device_kind(device);
  const CpuTarget cpu = open_cpu_backend(threads);
  if (kind == DeviceKind::cpu) return {.cpu_isa = cpu.isa, .threads = cpu.threads};
  const GpuTarget gpu = open_gpu(gpu_index(device), "--device " + device);
  return {
      .kind = DeviceKind::cuda, .cpu_isa = cpu.isa, .threads = cpu.threads, .gpu = gpu.index, .tf32 = tf32};
}

std::optional<DeviceMemoryInfo> device_memory_info(const DeviceTarget& target) {
  if (target.kind == DeviceKind::cuda) return gpu_memory(target.gpu);
  return std::nullopt;
}

DeviceTraits device_traits(const DeviceTarget& target, DType dtype, int64_t seq_len, int64_t head_dim) {
  if (target.kind == DeviceKind::cuda) return gpu_device_traits(dtype, seq_len, head_dim, "--device cuda");
  return cpu_device_traits(cpu_target(target), dtype, seq_len, head_dim);
}

std::unique_ptr<Backend> make_backend(const DeviceTarget& target, const ModelStatePolicy& policy) {
  if (target.kind == DeviceKind::cuda)
    return make_gpu_backend({.index = target.gpu, .tf32 = target.tf32}, policy);
  return make_cpu_backend(cpu_target(target), policy);
}

}  // namespace mt
