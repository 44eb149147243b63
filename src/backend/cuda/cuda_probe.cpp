// The GPU side of a build with CUDA (MEMTRAIN_CUDA on): the CUDA runtime is linked and finds the GPUs, but no
// backend trains on them yet, and --device cuda says so rather than falling back to the CPU.
#include <cuda_runtime_api.h>

#include "backend/gpu.h"
#include "core/error.h"

namespace mt {

void refuse_gpu(const std::string& where) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  const std::string found = status == cudaSuccess
                                ? std::to_string(devices) + " GPU(s) found"
                                : std::string("no GPU found: ") + cudaGetErrorString(status);
  fail_usage(where + ": this memtrain was built with CUDA (" + found +
             "), but its CUDA backend is not written yet; it trains on the CPU (--device cpu)");
}

}  // namespace mt
