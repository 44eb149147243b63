#include "memory/device_allocator.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "memory/plan.h"

namespace mt {

namespace {

class HostAllocator final : public DeviceAllocator {
 public:
  std::string_view name() const override { return "host"; }
  void* allocate(int64_t bytes) override {
    void* data = std::aligned_alloc(kArenaAlignment, static_cast<size_t>(arena_aligned(bytes)));
    if (!data) throw std::bad_alloc();
    std::memset(data, 0, static_cast<size_t>(bytes));
    return data;
  }
  void release(void* data, int64_t /*bytes*/) override { std::free(data); }
};

}  // namespace

DeviceAllocator& host_allocator() {
  static HostAllocator host;
  return host;
}

}  // namespace mt
