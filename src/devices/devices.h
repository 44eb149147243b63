// The room that chooses the device: which devices this build has (the CPU; CUDA only where it was built with
// it), what a plan made for one needs to know (its traits for a run's shapes), and the backend a run trains
// on. Besides forecast/calibrate, the only room that includes backend/: everything below it sees the device
// through memory/device.h and exec/backend.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/cpu_isa.h"
#include "exec/backend.h"
#include "memory/device_traits.h"
#include "memory/plan.h"

namespace mt {

// The device a plan is made for and a run trains on: the CPU, the one device a build can train on today.
struct DeviceTarget {
  CpuIsa cpu_isa = CpuIsa::generic;  // the CPU kernels' level
  int threads = 1;                   // the CPU kernels' OpenMP threads
};

// Decides the CPU kernels' level (the CPU's, capped by MEMTRAIN_MAX_ISA) before any product runs or any
// default reads it; a bad MEMTRAIN_MAX_ISA is a usage error.
void init_devices();
// The level this process's CPU kernels run at.
CpuIsa process_cpu_isa();
// The OpenMP threads this process runs unless a run sets them (OMP_NUM_THREADS, else its cores).
int process_threads();

// --device: "cpu" and nothing else today; "cuda" and "cuda:N" are usage errors saying why (a build without
// CUDA, or one whose CUDA backend does not train yet), and any other name one naming the choices.
void check_device(const std::string& device);
// This process's device for a run (--device, checked as check_device does): the CPU at this process's level,
// its OpenMP threads set to `threads`.
DeviceTarget open_device(const std::string& device, int threads);

DeviceTraits device_traits(const DeviceTarget& target, DType dtype, int64_t seq_len, int64_t head_dim);

// The backend a run trains on, for model states laid out as `policy` says.
std::unique_ptr<Backend> make_backend(const DeviceTarget& target, const ModelStatePolicy& policy);

}  // namespace mt
