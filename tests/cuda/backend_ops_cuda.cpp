// The GPU as the backend-ops test's backend under test: every case against the CPU's generic level
// (tests/unit/backend_ops_test.cpp), op by op, where a GPU is found; skipped with the reason where none is.
#include <cuda_runtime_api.h>

#include "backend/gpu.h"
#include "backend_ops.h"

namespace mt::backend_ops {

BackendUnderTest cuda_backend_under_test() {
  std::string why;
  const bool found = gpu_count(&why) > 0;
  return {
      .name = "cuda",
      .traits = [](DType dtype, int64_t seq_len,
                   int64_t head_dim) { return gpu_device_traits(dtype, seq_len, head_dim, "cuda"); },
      .make = [](const ModelStatePolicy& policy) { return make_gpu_backend(open_gpu(0, "cuda"), policy); },
      // The harness reads back after the ops: a kernel's fault shows at that copy, named by the op.
      .scope = [](const std::function<void()>& body) { body(); },
      .unavailable = found ? std::string() : why,
      // One GPU: no vocabulary split over tensor-parallel ranks.
      .runs = [](const OpCase& c) { return c.step.tp == 1; },
      .runs_collectives = false};
}

}  // namespace mt::backend_ops
