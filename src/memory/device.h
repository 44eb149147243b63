// The seam between the engine and the device that holds a run's tensors, in the spirit of ggml's backend
// tables: where its buffers come from, and the operations on them that the rooms above memory/ need besides
// the graph's ops (initialising, loading and saving model states, the ZeRO exchanges' copies, the
// optimizer step). Nothing above this header touches a tensor's bytes by itself: it asks the device, whose
// memory may not be the host's. A backend (exec/backend.h) is a Device that also runs the graph's ops;
// devices/ chooses one; the CPU's is backend/cpu/cpu_device.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/adamw_step.h"
#include "core/dtype.h"
#include "core/weight_format.h"
#include "memory/category.h"
#include "memory/device_allocator.h"

namespace mt {

// What a run says about its device: the banner's words, and the fields memory.json and metrics.jsonl record
// (the CPU's: "cpu_isa").
struct DeviceDescription {
  std::string name;    // "cpu"
  std::string banner;  // "2 threads | cpu avx512_bf16 | matmul onednn"
  std::vector<std::pair<std::string, std::string>> fields;
};

// The operands of one AdamW update of n consecutive flat parameters (core/adamw_step.h): weights (and their
// fp32 master copy, or null) updated from gradients, with moments in the policy's storage (fp32 or bf16 here;
// 8-bit ones are QuantizedMoments). Pointers are into the device's memory.
struct AdamWOperands {
  float* master = nullptr;
  void* weights = nullptr;
  DType weights_dtype = DType::f32;
  const void* grads = nullptr;
  DType grads_dtype = DType::f32;
  int64_t n = 0;
};

// Pieces of a device buffer as the host sees them: `data` holds `bytes` bytes at `offset` in the buffer.
// Pieces cover the buffer in order and start at multiples of 64 bytes (so of any element's size).
using HostReader = std::function<void(const char* data, int64_t offset, int64_t bytes)>;
using HostWriter = std::function<void(char* data, int64_t offset, int64_t bytes)>;

// What the driver of a device with memory of its own (a GPU) says of it.
struct DeviceMemoryInfo {
  int64_t free_bytes = 0, total_bytes = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceDescription description() const = 0;
  // Its memory as its driver sees it, after the work queued so far; none on the CPU, whose memory is the
  // host's. A run shows with it that it allocates what the plan says and nothing during a step.
  virtual std::optional<DeviceMemoryInfo> memory_info() { return std::nullopt; }
  // The allocator of each memory space; the Allocation and its arenas take every planned buffer from these.
  virtual DeviceAllocator& allocator(MemorySpace space) = 0;

  // Buffers of this device's memory (dst, src, x) and of host memory (host).
  virtual void zero(void* dst, int64_t bytes) = 0;
  virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host, int64_t bytes) = 0;
  virtual void copy_to_host(void* host, const void* src, int64_t bytes) = 0;
  // Hands the host `bytes` at src, or lets it fill `bytes` at dst, a piece at a time: the CPU hands over its
  // own memory (no copy); an accelerator stages the pieces.
  virtual void read(const void* src, int64_t bytes, const HostReader& read) = 0;
  virtual void write(void* dst, int64_t bytes, const HostWriter& write) = 0;
  // dst[i] = src[i] rounded to `to` (nearest even); f32, bf16 and f16.
  virtual void convert(void* dst, DType to, const void* src, DType from, int64_t n) = 0;

  // The sum of squares of n elements (f32 or bf16), in double and a fixed order: the same bits for any thread
  // count. Non-finite when an element is: the optimizer's overflow check (the unscaling is its
  // AdamWStep::grad_multiplier).
  virtual double sum_of_squares(const void* x, DType dtype, int64_t n) = 0;
  // AdamW over fp32 or bf16 moments m and v (`moments`).
  virtual void adamw_update(const AdamWOperands& params, void* m, void* v, DType moments,
                            const AdamWStep& step, const AdamWRounding& rounding) = 0;
  // AdamW over 8-bit block-quantized moments; `runs` give each element's weight decay.
  virtual void adamw_update_blocked(const AdamWOperands& params, const QuantizedMoments& moments,
                                    const AdamWStep& step, std::span<const DecayRun> runs,
                                    const AdamWRounding& rounding) = 0;
  // Adam-mini (backend/cpu/adam_mini.h): one tensor's fp32 second moments per block at v from its whole
  // gradient (grads_dtype), then the first moments and weights of any range with v already this step's.
  virtual void adam_mini_second_moments(const void* grads, DType grads_dtype, float* v,
                                        const MiniBlockLayout& blocks, const AdamWStep& step) = 0;
  // Where a rank holds part of a tensor's gradient (ZeRO-2, 3): its blocks' sums of squares over elements
  // [first, first + n) (grads at element `first`) added to sums; then v from the sums over all ranks.
  virtual void adam_mini_block_squares(const void* grads, DType grads_dtype, const MiniBlockLayout& blocks,
                                       int64_t first, int64_t n, float grad_multiplier, double* sums) = 0;
  virtual void adam_mini_second_moments_from_sums(float* v, const double* sums, const MiniBlockLayout& blocks,
                                                  const AdamWStep& step) = 0;
  // Elements [first, first + params.n) of one tensor, params at element `first`; the first moment m in fp32
  // or bf16 (`moments`).
  virtual void adam_mini_update(const AdamWOperands& params, void* m, DType moments, const float* v,
                                const MiniBlockLayout& blocks, int64_t first, const AdamWStep& step,
                                const AdamWRounding& rounding) = 0;
  // params.n elements from a quantization block's start, covered by `tensors` in order, whose first moment
  // m is 8-bit, quantized as AdamW's (`format`; its scales at m_scales).
  virtual void adam_mini_update_blocked(const AdamWOperands& params, MomentFormat format, uint8_t* m,
                                        float* m_scales, std::span<const MiniTensor> tensors,
                                        const AdamWStep& step, const AdamWRounding& rounding) = 0;
  // A frozen base weight's n values (host fp32) quantized into its buffers (QLoRA).
  virtual void quantize_weight(const float* host_values, const QuantizedWeight& into) = 0;
};

}  // namespace mt
