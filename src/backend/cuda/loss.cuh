// The step's loss on the GPU: each loss op adds the mean of its per-position losses over the step's counted
// targets into the graph's f64 loss scalar, as the CPU's runner does on the host, so no loss op copies a
// number back.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::cuda {

// *loss_sum += (sum of losses[0, n), in double, in one fixed order) / counted; counted > 0.
void add_mean_loss(double* loss_sum, const float* losses, int64_t n, int64_t counted, cudaStream_t stream);

}  // namespace mt::cuda
