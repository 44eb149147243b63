#include "memory/tracked.h"

#include <algorithm>
#include <utility>

namespace mt {

void MemoryTracker::on_allocate(Category c, int64_t bytes) {
  held_[c] += bytes;
  peak_[c] = std::max(peak_[c], held_[c]);
  committed_ += allocator_->committed(bytes);
}

void MemoryTracker::on_release(Category c, int64_t bytes) {
  held_[c] -= bytes;
  committed_ -= allocator_->committed(bytes);
}

TrackedBuffer::TrackedBuffer(MemoryTracker& tracker, Category category, int64_t bytes)
    : tracker_(&tracker), category_(category), bytes_(bytes) {
  if (bytes == 0) return;
  data_ = tracker.allocator().allocate(bytes);
  tracker.on_allocate(category, bytes);
}

TrackedBuffer::~TrackedBuffer() {
  release();
}

TrackedBuffer::TrackedBuffer(TrackedBuffer&& other) noexcept {
  *this = std::move(other);
}

TrackedBuffer& TrackedBuffer::operator=(TrackedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    tracker_ = std::exchange(other.tracker_, nullptr);
    category_ = other.category_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void TrackedBuffer::release() {
  if (data_) {
    tracker_->allocator().release(data_, bytes_);
    tracker_->on_release(category_, bytes_);
  }
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace mt
