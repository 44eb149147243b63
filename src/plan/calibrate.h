// `memtrain calibrate`: measures this machine into a HardwareProfile for the cost model, through the paths
// training takes (kernels/matmul's gemm, the MPI communicator, files like the optimizer offload's).
#pragma once

#include <string>

#include "dist/communicator.h"
#include "plan/hardware_profile.h"

namespace mt {

struct CalibrateOptions {
  std::string scratch_dir = "/tmp";  // where the disk test's temporary file goes (an --offload-path)
  double seconds_per_test = 0.3;     // each rate is the best of repeats filling about this long
};

// Every rank must call it (the MPI test is collective); `comm` of one rank records MPI as absent.
HardwareProfile calibrate(Communicator& comm, const CalibrateOptions& options);

}  // namespace mt
