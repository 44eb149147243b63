// Tracked allocation: every byte the trainer holds is handed out here or by an Arena, and counted by
// category, so the memory report's "measured" column comes from the allocations themselves, not from the
// plan.
#pragma once

#include <cstdint>
#include <memory>

#include "memory/category.h"
#include "memory/device_allocator.h"

namespace mt {

// Counts the bytes of the buffers taken from one allocator.
class MemoryTracker {
 public:
  explicit MemoryTracker(DeviceAllocator& allocator) : allocator_(&allocator) {}
  DeviceAllocator& allocator() const { return *allocator_; }
  void on_allocate(Category c, int64_t bytes);
  void on_release(Category c, int64_t bytes);
  // The most bytes held at once, per category.
  const CategoryBytes& peak() const { return peak_; }
  const CategoryBytes& held() const { return held_; }
  // What the allocator committed for the buffers held now (DeviceAllocator::committed of each).
  int64_t committed() const { return committed_; }

 private:
  DeviceAllocator* allocator_;
  int64_t committed_ = 0;
  CategoryBytes held_;
  CategoryBytes peak_;
};

// One zero-filled block of a category from its tracker's allocator (aligned as the device aligns its
// tensors), counted by the tracker while it lives.
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(MemoryTracker& tracker, Category category, int64_t bytes);
  ~TrackedBuffer();
  TrackedBuffer(TrackedBuffer&& other) noexcept;
  TrackedBuffer& operator=(TrackedBuffer&& other) noexcept;
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  void release();
  MemoryTracker* tracker_ = nullptr;
  Category category_ = Category::other;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace mt
