// The GPU as a device (memory/device.h): every planned buffer is one allocation of device memory (pinned
// host memory for the host space), nothing is allocated during a step, the host reads and writes device
// memory through a staging buffer, and the host-facing operations (convert, sum of squares, AdamW in every
// moment format) are kernels on the backend's one stream. The op runner that makes it a Backend, per storage
// type, is cuda_runner.cu.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <memory>

#include "backend/gpu.h"

namespace mt {

class CudaDevice : public Backend {
 public:
  explicit CudaDevice(const GpuTarget& target);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  DeviceDescription description() const override;
  std::optional<DeviceMemoryInfo> memory_info() override;
  DeviceAllocator& allocator(MemorySpace space) override;
  void zero(void* dst, int64_t bytes) override;
  void copy(void* dst, const void* src, int64_t bytes) override;
  void copy_from_host(void* dst, const void* host, int64_t bytes) override;
  void copy_to_host(void* host, const void* src, int64_t bytes) override;
  void read(const void* src, int64_t bytes, const HostReader& read) override;
  void write(void* dst, int64_t bytes, const HostWriter& write) override;
  void convert(void* dst, DType to, const void* src, DType from, int64_t n) override;
  double sum_of_squares(const void* x, DType dtype, int64_t n) override;
  void adamw_update(const AdamWOperands& params, void* m, void* v, DType moments, const AdamWStep& step,
                    const AdamWRounding& rounding) override;
  void adam_mini_second_moments(const void* grads, DType grads_dtype, float* v, const MiniBlockLayout& blocks,
                                const AdamWStep& step) override;
  void adam_mini_block_squares(const void* grads, DType grads_dtype, const MiniBlockLayout& blocks,
                               int64_t first, int64_t n, float grad_multiplier, double* sums) override;
  void adam_mini_second_moments_from_sums(float* v, const double* sums, const MiniBlockLayout& blocks,
                                          const AdamWStep& step) override;
  void adam_mini_update(const AdamWOperands& params, void* m, DType moments, const float* v,
                        const MiniBlockLayout& blocks, int64_t first, const AdamWStep& step,
                        const AdamWRounding& rounding) override;
  void adam_mini_update_blocked(const AdamWOperands& params, MomentFormat format, uint8_t* m, float* m_scales,
                                std::span<const MiniTensor> tensors, const AdamWStep& step,
                                const AdamWRounding& rounding) override;
  void adamw_update_blocked(const AdamWOperands& params, const QuantizedMoments& moments,
                            const AdamWStep& step, std::span<const DecayRun> runs,
                            const AdamWRounding& rounding) override;
  void quantize_weight(const float* host_values, const QuantizedWeight& into) override;
  void begin_pass(const Graph& graph) override;

 protected:
  const GpuTarget target_;
  cudaStream_t stream_ = nullptr;  // every kernel and copy of this backend, in order
  cublasLtHandle_t lt_ = nullptr;  // cuBLASLt's handle: created once, before the plan's allocation

 private:
  struct Resources;  // cuda_device.cu: the allocators, the staging buffer, the reductions' scratch
  std::unique_ptr<Resources> resources_;
};

// The runner for a model-state layout (cuda_runner.cu); a logic error for a layout without kernels.
std::unique_ptr<Backend> make_cuda_runner(const GpuTarget& target, const ModelStatePolicy& policy);

}  // namespace mt
