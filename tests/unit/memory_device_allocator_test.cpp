// Every TrackedBuffer takes its bytes from its tracker's DeviceAllocator and gives them back to it, so an
// accelerator's allocator sees every buffer an Arena or Allocation holds.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>

#include "memory/device_allocator.h"
#include "memory/plan.h"
#include "memory/tracked.h"

namespace mt {
namespace {

// Host memory, with the blocks it has handed out and not yet been given back.
class CountingAllocator final : public DeviceAllocator {
 public:
  std::string_view name() const override { return "counting"; }
  void* allocate(int64_t bytes) override {
    void* data = host_allocator().allocate(bytes);
    live[data] = bytes;
    return data;
  }
  void release(void* data, int64_t bytes) override {
    EXPECT_EQ(live.at(data), bytes);
    live.erase(data);
    host_allocator().release(data, bytes);
  }
  std::map<void*, int64_t> live;
};

TEST(DeviceAllocator, TrackedBuffersComeFromTheirTrackersAllocator) {
  CountingAllocator allocator;
  MemoryTracker tracker(allocator);
  {
    TrackedBuffer a(tracker, Category::activations, 100);
    TrackedBuffer b(tracker, Category::workspace, 4096);
    ASSERT_EQ(allocator.live.size(), 2u);
    EXPECT_EQ(allocator.live.at(a.as<void>()), 100);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.as<void>()) % kArenaAlignment, 0u);
    for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(a.as<unsigned char>()[i], 0);
    TrackedBuffer moved = std::move(b);
    EXPECT_EQ(allocator.live.size(), 2u);
    EXPECT_EQ(tracker.held()[Category::workspace], 4096);
  }
  EXPECT_TRUE(allocator.live.empty());
  EXPECT_EQ(tracker.held()[Category::activations], 0);
  EXPECT_EQ(tracker.peak()[Category::workspace], 4096);
}

TEST(DeviceAllocator, HostIsTheDefault) {
  MemoryTracker tracker;
  EXPECT_EQ(tracker.allocator().name(), "host");
  EXPECT_EQ(&tracker.allocator(), &host_allocator());
}

}  // namespace
}  // namespace mt
