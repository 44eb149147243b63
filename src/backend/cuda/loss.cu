#include "backend/cuda/cuda_check.h"
#include "backend/cuda/loss.cuh"

namespace mt::cuda {

namespace {

constexpr int kThreads = 256;

// One block: each thread sums a strided slice in order, then a fixed tree: the same bits on every run.
__global__ void add_mean_loss_kernel(double* loss_sum, const float* losses, int64_t n, double counted) {
  __shared__ double partial[kThreads];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) sum += losses[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss_sum += partial[0] / counted;
}

}  // namespace

void add_mean_loss(double* loss_sum, const float* losses, int64_t n, int64_t counted, cudaStream_t stream) {
  add_mean_loss_kernel<<<1, kThreads, 0, stream>>>(loss_sum, losses, n, static_cast<double>(counted));
  check_launch("add_mean_loss");
}

}  // namespace mt::cuda
