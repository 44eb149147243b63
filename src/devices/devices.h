// The room that chooses the device: which devices this build has (the CPU; CUDA only where it was built with
// it), what a plan made for one needs to know (its traits for a run's shapes), and the backend a run trains
// on. Besides forecast/calibrate, the only room that includes backend/: everything below it sees the device
// through memory/device.h and exec/backend.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/cpu_isa.h"
#include "exec/backend.h"
#include "memory/device_traits.h"
#include "memory/plan.h"

namespace mt {

enum class DeviceKind { cpu, cuda };

// The device a plan is made for and a run trains on: the CPU, or one NVIDIA GPU (a build with CUDA).
struct DeviceTarget {
  DeviceKind kind = DeviceKind::cpu;
  CpuIsa cpu_isa = CpuIsa::generic;  // the CPU kernels' level (the host's, beside a GPU)
  int threads = 1;                   // the CPU kernels' OpenMP threads
  int gpu = 0;                       // cuda: the GPU's index
  bool tf32 = false;                 // cuda: fp32 products on TF32 tensor cores (--tf32)
};

// Decides the CPU kernels' level (the CPU's, capped by MEMTRAIN_MAX_ISA) before any product runs or any
// default reads it; a bad MEMTRAIN_MAX_ISA is a usage error.
void init_devices();
// The level this process's CPU kernels run at.
CpuIsa process_cpu_isa();
// The OpenMP threads this process runs unless a run sets them (OMP_NUM_THREADS, else its cores).
int process_threads();

// --device: "cpu", "cuda" or "cuda:N" (a usage error naming the choices otherwise, and for cuda in a build
// without CUDA). A plan for a GPU needs none: this checks the name, open_device finds the GPU.
void check_device(const std::string& device);
DeviceKind device_kind(const std::string& device);
// One process trains on one GPU: --device cuda with more than one rank is a usage error.
void check_device_ranks(const std::string& device, int64_t ranks);
// This process's device for a run (--device, checked as check_device does): the CPU at this process's level,
// its OpenMP threads set to `threads`; or the GPU it names, a usage error when there is none, its fp32
// products on TF32 where `tf32` says so.
DeviceTarget open_device(const std::string& device, int threads, bool tf32 = false);
// The target a plan for `device` is made for without opening it (estimate): the CPU at `isa` with `threads`,
// or the GPU it names.
DeviceTarget plan_target(const std::string& device, CpuIsa isa, int threads);

// The driver's view of the target's memory now (a GPU's; none for the CPU).
std::optional<DeviceMemoryInfo> device_memory_info(const DeviceTarget& target);

DeviceTraits device_traits(const DeviceTarget& target, DType dtype, int64_t seq_len, int64_t head_dim);

// The backend a run trains on, for model states laid out as `policy` says.
std::unique_ptr<Backend> make_backend(const DeviceTarget& target, const ModelStatePolicy& policy);

}  // namespace mt
