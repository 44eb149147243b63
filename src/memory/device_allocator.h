// Where the trainer's buffers live. Every TrackedBuffer, and so every arena and model-state buffer, takes its
// bytes from a DeviceAllocator of the run's device (memory/device.h: one per memory space): the CPU's hands
// out host memory; an accelerator's, its own. Nothing above memory/ allocates a planned byte itself.
#pragma once

#include <cstdint>
#include <string_view>

namespace mt {

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual std::string_view name() const = 0;
  // `bytes` zero-filled bytes aligned to the device's alignment (KernelSizes::alignment); std::bad_alloc when
  // there are none.
  virtual void* allocate(int64_t bytes) = 0;
  // Gives back what allocate(bytes) returned.
  virtual void release(void* data, int64_t bytes) = 0;
  // The bytes the device commits for one allocate(bytes), at its granularity: what its free memory drops
  // by. The host's allocator: bytes (the host's pages are not the plan's to count).
  virtual int64_t committed(int64_t bytes) const { return bytes; }
};

}  // namespace mt
