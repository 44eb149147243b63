// Where the trainer's buffers live. Every TrackedBuffer, and so every arena and model-state buffer, takes its
// bytes from one DeviceAllocator: host memory today; an accelerator backend supplies its own, beside its
// kernels, and nothing above memory/ changes.
#pragma once

#include <cstdint>
#include <string_view>

namespace mt {

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual std::string_view name() const = 0;
  // `bytes` zero-filled bytes aligned to kArenaAlignment (memory/plan.h); std::bad_alloc when there are none.
  virtual void* allocate(int64_t bytes) = 0;
  // Gives back what allocate(bytes) returned.
  virtual void release(void* data, int64_t bytes) = 0;
};

// Host memory, cache-line aligned.
DeviceAllocator& host_allocator();

}  // namespace mt
