// `memtrain calibrate`: measures this machine into a HardwareProfile for the cost model, through the paths
// training takes (backend/cpu/matmul.h's gemm, the MPI communicator, files like the optimizer offload's);
// with --device cuda, a GPU into a GpuProfile (backend/gpu.h's measure_gpu).
#pragma once

#include <string>

#include "devices/devices.h"
#include "dist/async_communicator.h"
#include "forecast/gpu_profile.h"
#include "forecast/hardware_profile.h"

namespace mt {

struct CalibrateOptions {
  std::string scratch_dir = "/tmp";  // where the disk test's temporary file goes (an --offload-path)
  double seconds_per_test = 0.3;     // each rate is the best of repeats filling about this long
};

// Every rank must call it (the MPI tests are collective); `comm` of one rank records MPI as absent. The
// exchanges run on `comm`'s worker beside the kernels, as training's overlapped ones do.
HardwareProfile calibrate(AsyncCommunicator& comm, const CalibrateOptions& options);

// The opened GPU `target` measured into a profile of source "calibrate", named for --gpu after the card;
// `runtime_overhead` is the caller's measure of it (the run's backend open, nothing of a plan allocated).
GpuProfile calibrate_gpu(const DeviceTarget& target, int64_t runtime_overhead,
                         const CalibrateOptions& options);

}  // namespace mt
