#include "memory/arena.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <stdexcept>

namespace mt {

Arena::Arena(const TensorTable& table, const ArenaLayout& layout, Category category,
             DeviceAllocator& allocator, int64_t alignment)
    : table_(table),
      layout_(layout),
      alignment_(alignment),
      untracked_(allocator),
      buffer_(untracked_, category, layout.size),
      live_(table.size(), 0) {
  int num_ops = 0;
  for (int id = 0; id < table.size(); ++id)
    if (layout.offset[id] >= 0) num_ops = std::max(num_ops, table[id].last_op + 1);
  starts_at_.resize(num_ops);
  ends_at_.resize(num_ops);
  for (int id = 0; id < table.size(); ++id) {
    if (layout.offset[id] < 0) continue;
    starts_at_[table[id].first_op].push_back(id);
    ends_at_[table[id].last_op].push_back(id);
  }
}

// Bound ranges never overlap (binding checks), and an empty one never lies inside another: if any range
// overlaps [begin, end), the last one that starts before `end` does.
int Arena::live_overlapping(int64_t begin, int64_t end) const {
  const auto after = live_ranges_.lower_bound({end, std::numeric_limits<int64_t>::min(), -1});
  if (after == live_ranges_.begin()) return -1;
  const auto& [other_begin, other_end, other] = *std::prev(after);
  return other_end > begin ? other : -1;
}

void Arena::begin_op(int op) {
  if (op >= static_cast<int>(starts_at_.size())) return;
  for (int id : starts_at_[op]) {
    const int64_t begin = layout_.offset[id], end = begin + table_[id].bytes();
    if (const int other = live_overlapping(begin, end); other >= 0)
      throw std::logic_error("arena: " + table_[id].name + " overlaps live " + table_[other].name);
    live_[id] = 1;
    live_ranges_.emplace(begin, end, id);
    live_bytes_ += arena_aligned(table_[id].bytes(), alignment_);
    high_water_ = std::max(high_water_, arena_aligned(end, alignment_));
  }
}

void Arena::end_op(int op) {
  if (op >= static_cast<int>(ends_at_.size())) return;
  for (int id : ends_at_[op]) {
    live_[id] = 0;
    live_ranges_.erase({layout_.offset[id], layout_.offset[id] + table_[id].bytes(), id});
    live_bytes_ -= arena_aligned(table_[id].bytes(), alignment_);
  }
}

void Arena::reset() {
  for (const auto& [begin, end, id] : live_ranges_) live_[id] = 0;
  live_ranges_.clear();
  live_bytes_ = 0;
}

void* Arena::data(int id) const {
  if (id < 0 || id >= table_.size() || !live_[id])
    throw std::logic_error("arena: access to " + (id >= 0 && id < table_.size() ? table_[id].name : "?") +
                           " outside its lifetime");
  return buffer_.as<char>() + layout_.offset[id];
}

float* Arena::f32(int id) const {
  return static_cast<float*>(data(id));
}

}  // namespace mt
