// The CPU as a device (memory/device.h): its memory is the host's, so its buffers come from one cache-line
// aligned host allocator, the host reads and writes them in place, and the host-facing operations are the
// kernels of backend/cpu/ (convert, sum of squares, AdamW, the weight quantizer). The op runner that makes it
// a Backend, per storage type, is cpu_runner.cpp.
#pragma once

#include "backend/cpu/cpu_backend.h"

namespace mt {

class CpuDevice : public Backend {
 public:
  explicit CpuDevice(const CpuTarget& target);

  DeviceDescription description() const override;
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
  // OpenMP must run no more threads than the target's: the kernels' scratch holds that many.
  void begin_pass(const Graph& graph) override;

 protected:
  const CpuTarget target_;
};

// The CPU's allocator: zero-filled host memory aligned to kCpuAlignment.
DeviceAllocator& cpu_allocator();

}  // namespace mt
