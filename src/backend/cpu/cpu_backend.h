// The CPU backend's entry points, for the room that chooses the device (devices/devices.h): what a plan for
// the CPU needs (its traits for a run's shapes) and the backend a run trains on. The ISA level and the
// OpenMP threads are the CPU backend's own: a target names them, and opening the backend sets them.
#pragma once

#include <cstdint>
#include <memory>

#include "core/cpu_isa.h"
#include "exec/backend.h"
#include "memory/device_traits.h"
#include "memory/plan.h"

namespace mt {

// The CPU a plan is made for: the level its kernels run at and the OpenMP threads they share a step among.
struct CpuTarget {
  CpuIsa isa = CpuIsa::generic;
  int threads = 1;
};

// Every packed tensor starts on a cache line.
constexpr int64_t kCpuAlignment = 64;

// Decides this process's level (the CPU's, capped by MEMTRAIN_MAX_ISA, and oneDNN capped to it): before any
// product runs or any default reads it; a bad MEMTRAIN_MAX_ISA is a usage error.
CpuIsa init_cpu_backend();
// OpenMP's threads for this process unless a run sets them (OMP_NUM_THREADS, else the cores).
int cpu_default_threads();
// This process's CPU for a run: OpenMP set to `threads` (ranks sharing a machine take one each), at the level
// init_cpu_backend decided.
CpuTarget open_cpu_backend(int threads);

DeviceTraits cpu_device_traits(const CpuTarget& target, DType dtype, int64_t seq_len, int64_t head_dim);

// The backend for a run whose model states are laid out as `policy` says (weights fp32, bf16 or f16;
// gradients fp32 or bf16), at `target`'s level, with OpenMP set to its threads; a logic error for a layout
// without kernels, or a level above this CPU's.
std::unique_ptr<Backend> make_cpu_backend(const CpuTarget& target, const ModelStatePolicy& policy);

}  // namespace mt
