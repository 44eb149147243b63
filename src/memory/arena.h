// An Arena hands out the planned offsets of one category's tensors while the step runs. Tensors are bound
// when their first op begins and released after their last op; binding checks that no live tensor overlaps,
// and an access outside a tensor's lifetime is an error. Its high-water mark is the measured size of the
// category.
#pragma once

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "memory/plan.h"
#include "memory/tensor_table.h"
#include "memory/tracked.h"

namespace mt {

class Arena {
 public:
  // The arena's block comes from `allocator`; its tensors start on multiples of `alignment`, as packed.
  Arena(const TensorTable& table, const ArenaLayout& layout, Category category, DeviceAllocator& allocator,
        int64_t alignment);

  void begin_op(int op);
  void end_op(int op);
  // Releases every live tensor (after a forward-only pass, whose tensors never reach their last op).
  void reset();

  // The tensor's memory; throws std::logic_error when it is not live (a schedule bug).
  float* f32(int id) const;
  void* data(int id) const;

  int64_t high_water() const { return high_water_; }
  // Bytes of the tensors bound now, each by its aligned size as the Plan packs it, so the live bytes of any
  // moment fit in the planned arena; the difference is memory the packing could not reuse.
  int64_t live_bytes() const { return live_bytes_; }
  int64_t capacity() const { return buffer_.bytes(); }
  // What its allocator committed for the arena's block (DeviceAllocator::committed).
  int64_t committed() const { return untracked_.committed(); }

 private:
  const TensorTable& table_;
  const ArenaLayout& layout_;
  int64_t alignment_;
  MemoryTracker untracked_;  // the arena's own block is measured by its high-water mark instead
  TrackedBuffer buffer_;
  std::vector<std::vector<int>> starts_at_, ends_at_;  // per op
  // The tensor among those bound that [begin, end) overlaps, or -1.
  int live_overlapping(int64_t begin, int64_t end) const;

  std::vector<char> live_;
  // The bound tensors as (begin, end, id), in address order: a step binds every saved activation of every
  // layer, so an overlap is looked up next to the new tensor rather than checked against each of them.
  std::set<std::tuple<int64_t, int64_t, int>> live_ranges_;
  int64_t high_water_ = 0;
  int64_t live_bytes_ = 0;
};

}  // namespace mt
