// The sizes of packings already made, kept by exactly what they packed: what a configuration search reads,
// which plans one graph under several model-state settings (the precision's moments and gradients, ZeRO,
// offload) whose tables hold the same arena tensors, and graphs that share their arenas. Those arenas are
// packed once. The key is every packed tensor's bytes and lifetime in id order, which is all pack_arena
// reads, so a hit returns pack_arena's own sizes; so does a hit on a key whose bytes are all one multiple
// of the asked ones, scaled (scale_from says why), as each micro-batch's activations often are. No offsets
// are kept or returned: a search places no tensor. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "memory/plan.h"

namespace mt {

class ArenaPackCache {
 public:
  // pack_arena(table, category, alignment)'s size and sum_of_tensors (no offsets), packed once per key.
  ArenaLayout pack(const TensorTable& table, Category category, int64_t alignment);
  int64_t packed() const {  // the pack_arena calls made: the keys not found
    const std::lock_guard<std::mutex> lock(mutex_);
    return packed_;
  }

 private:
  struct Packed {
    int64_t bytes;
    int first_op, last_op;
  };
  struct Entry {
    int64_t alignment;
    std::vector<Packed> key;  // the category's tensors with lifetimes, in id order
    int64_t size, sum_of_tensors;
  };
  struct Ratio {  // num / den > 0
    int64_t num = 1, den = 1;
    int64_t apply(int64_t count) const;  // exact (std::logic_error if not whole; SizeOverflow)
  };
  // The ratio of `key`'s bytes to the entry's when its packing is the entry's scaled by it.
  static std::optional<Ratio> scale_from(const Entry& e, const std::vector<Packed>& key);
  // The search's precisions each try every micro-batch, so its arenas recur every few candidates: about a
  // dozen distinct graphs (weights in fp32, bf16 or fp16 at each micro-batch), three arenas each. The least
  // recently used go first; the bound keeps what is held (every layer's tensors per entry) to a few plans.
  static constexpr size_t kEntries = 36;
  mutable std::mutex mutex_;  // threads of a search share the cache
  std::deque<Entry> entries_;
  int64_t packed_ = 0;
};

}  // namespace mt
