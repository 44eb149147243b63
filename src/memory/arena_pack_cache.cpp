#include "memory/arena_pack_cache.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>

#include "core/int_math.h"

namespace mt {

int64_t ArenaPackCache::Ratio::apply(int64_t count) const {
  // SizeOverflow where the packing's own sums would overflow 64 bits.
  if (den == 1) return checked_mul(count, num);
  const __int128 scaled = static_cast<__int128>(count) * num;
  if (scaled % den != 0) throw std::logic_error("arena pack cache: a scaled offset is not whole");
  if (scaled / den > INT64_MAX) throw SizeOverflow("a scaled packing overflows 64 bits");
  return static_cast<int64_t>(scaled / den);
}

// The arena `key` asks for may be an entry's with every tensor's bytes, and aligned bytes, times one ratio
// (one for the same key) and the same lifetimes. Then its packing is the entry's scaled: pack_arena's order
// (bytes, then start, then id) is the same, and the lowest free offset of a scaled arena is the scaled lowest
// free offset, since it is always zero or the end of a placed tensor. A micro-batch's activations are
// micro-batch one's scaled wherever every activation's bytes are a multiple of the alignment.
std::optional<ArenaPackCache::Ratio> ArenaPackCache::scale_from(const Entry& e,
                                                                const std::vector<Packed>& key) {
  if (e.key.size() != key.size()) return std::nullopt;
  // The ratio of the first tensor that holds bytes; one where none does (the same key, or none).
  Ratio ratio;
  const auto first_sized =
      std::find_if(e.key.begin(), e.key.end(), [](const Packed& p) { return p.bytes > 0; });
  if (first_sized != e.key.end()) {
    const int64_t from = first_sized->bytes, to = key[static_cast<size_t>(first_sized - e.key.begin())].bytes;
    if (to <= 0) return std::nullopt;
    ratio = {.num = to / std::gcd(from, to), .den = from / std::gcd(from, to)};
  }
  const auto scales = [&](int64_t a, int64_t b) {
    return static_cast<__int128>(a) * ratio.num == static_cast<__int128>(b) * ratio.den;
  };
  for (size_t i = 0; i < key.size(); ++i) {
    const Packed &a = e.key[i], &b = key[i];
    if (a.first_op != b.first_op || a.last_op != b.last_op || !scales(a.bytes, b.bytes) ||
        !scales(arena_aligned(a.bytes, e.alignment), arena_aligned(b.bytes, e.alignment)))
      return std::nullopt;
  }
  return ratio;
}

ArenaLayout ArenaPackCache::pack(const TensorTable& table, Category category, int64_t alignment) {
  std::vector<Packed> key;
  for (const TensorDesc& t : table.tensors())
    if (t.category == category && t.has_lifetime()) key.push_back({t.bytes(), t.first_op, t.last_op});
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    // The most recently used first; the same key is a ratio of one.
    for (auto e = entries_.rbegin(); e != entries_.rend(); ++e) {
      const std::optional<Ratio> ratio = e->alignment == alignment ? scale_from(*e, key) : std::nullopt;
      if (!ratio) continue;
      const auto used = std::prev(e.base());
      std::rotate(used, used + 1, entries_.end());  // now the most recently used
      const Entry& hit = entries_.back();
      return {
          .size = ratio->apply(hit.size), .sum_of_tensors = ratio->apply(hit.sum_of_tensors), .offset = {}};
    }
  }
  // Packed unlocked: two threads may pack one key at once, and get the same sizes.
  const ArenaLayout layout = pack_arena(table, category, alignment);
  const std::lock_guard<std::mutex> lock(mutex_);
  ++packed_;
  if (entries_.size() == kEntries) entries_.pop_front();
  entries_.push_back({alignment, std::move(key), layout.size, layout.sum_of_tensors});
  return {.size = layout.size, .sum_of_tensors = layout.sum_of_tensors, .offset = {}};
}

}  // namespace mt
