#include "memory/arena_pack_cache.h"

#include <algorithm>

namespace mt {

ArenaLayout ArenaPackCache::pack(const TensorTable& table, Category category, int64_t alignment) {
  std::vector<Packed> key;
  std::vector<int> ids;
  for (int id = 0; id < table.size(); ++id) {
    const TensorDesc& t = table[id];
    if (t.category != category || !t.has_lifetime()) continue;
    key.push_back({t.bytes(), t.first_op, t.last_op});
    ids.push_back(id);
  }
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto hit = std::find_if(entries_.begin(), entries_.end(),
                                  [&](const Entry& e) { return e.alignment == alignment && e.key == key; });
    if (hit != entries_.end()) {
      std::rotate(hit, hit + 1, entries_.end());  // now the most recently used
      const Entry& e = entries_.back();
      ArenaLayout layout{.size = e.size, .sum_of_tensors = e.sum_of_tensors, .offset = {}};
      layout.offset.assign(table.size(), -1);
      for (size_t i = 0; i < ids.size(); ++i) layout.offset[ids[i]] = e.offsets[i];
      return layout;
    }
  }
  // Packed unlocked: two threads may pack one key at once, and get the same layout.
  ArenaLayout layout = pack_arena(table, category, alignment);
  std::vector<int64_t> offsets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) offsets[i] = layout.offset[ids[i]];
  const std::lock_guard<std::mutex> lock(mutex_);
  ++packed_;
  if (entries_.size() == kEntries) entries_.pop_front();
  entries_.push_back({alignment, std::move(key), std::move(offsets), layout.size, layout.sum_of_tensors});
  return layout;
}

}  // namespace mt
