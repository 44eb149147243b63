// Guard bytes around every buffer a backend's allocation hands out, checked after every op: a kernel that
// writes past either end of a tensor is caught at the op that did it, even where the allocator's rounding
// (the CPU's: to 64 bytes) would have hidden it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend_ops.h"
#include "memory/allocation.h"
#include "memory/device_allocator.h"

namespace mt::backend_ops {

// Pads each block of `inner` with kGuardBytes of a known pattern before and after, written and read through
// the device (its memory may not be the host's); the block handed out starts after the first pad, so it
// keeps the inner allocator's alignment.
class GuardAllocator final : public DeviceAllocator {
 public:
  static constexpr int64_t kGuardBytes = 256;

  GuardAllocator(DeviceAllocator& inner, Device& device, std::vector<std::string>& problems)
      : inner_(inner), device_(device), problems_(problems) {}
  std::string_view name() const override { return inner_.name(); }
  void* allocate(int64_t bytes) override;
  // Checks the block's guards before giving it back.
  void release(void* data, int64_t bytes) override;
  // Names a block in problems ("x.out"); unnamed ones are "a block of N bytes".
  void label(const void* data, std::string name);
  // Checks every live block's guards; a broken one is reported `when` and rewritten, so it is reported once.
  void check(const std::string& when);

 private:
  struct Block {
    int64_t bytes;
    std::string label;
  };
  void write_guards(char* data, int64_t bytes);
  // Empty when both guards hold the pattern; else which one is broken and where.
  std::string broken_guard(const char* data, const Block& block);

  DeviceAllocator& inner_;
  Device& device_;
  std::vector<std::string>& problems_;
  std::map<const char*, Block> blocks_;
};

// The backend under test with guard allocators in place of its own, checking every guard after each op it
// runs and after the logits.
class GuardedBackend final : public ForwardingBackend {
 public:
  explicit GuardedBackend(Backend& inner)
      : ForwardingBackend(inner),
        device_(inner.allocator(MemorySpace::device), inner, problems_),
        host_(inner.allocator(MemorySpace::host), inner, problems_) {}

  DeviceAllocator& allocator(MemorySpace space) override {
    return space == MemorySpace::host ? static_cast<DeviceAllocator&>(host_) : device_;
  }
  void run(const Op& op, const OpRun& run) override;
  void logits(const Op& head, const OpRun& run, float* host_out) override;
  // Names the allocation's buffers after their tensors.
  void label(const Allocation& memory);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  void check(const std::string& when);

  std::vector<std::string> problems_;
  GuardAllocator device_, host_;
};

}  // namespace mt::backend_ops
