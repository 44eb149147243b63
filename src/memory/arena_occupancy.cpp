#include "memory/arena_occupancy.h"

#include <algorithm>
#include <array>
#include <iterator>

#include "core/int_math.h"

namespace mt {

ArenaOccupancy::ArenaOccupancy(int num_ops) {
  while (leaves_ < num_ops) leaves_ *= 2;
  whole_.resize(2 * leaves_);
  within_.resize(2 * leaves_);
}

// The first interval of `set` that ends after `offset`.
ArenaOccupancy::Intervals::const_iterator ArenaOccupancy::first_ending_after(const Intervals& set,
                                                                             int64_t offset) {
  return std::upper_bound(set.begin(), set.end(), offset,
                          [](int64_t x, const Interval& interval) { return x < interval.end; });
}

void ArenaOccupancy::add(Intervals& set, int64_t begin, int64_t end) {
  if (begin >= end) return;  // an empty tensor holds no byte
  // The intervals that overlap or touch [begin, end) become one.
  auto first = std::lower_bound(set.begin(), set.end(), begin,
                                [](const Interval& interval, int64_t x) { return interval.end < x; });
  auto last = first;
  while (last != set.end() && last->begin <= end) ++last;
  if (first == last) {
    set.insert(first, {begin, end});
    return;
  }
  first->begin = std::min(first->begin, begin);
  first->end = std::max(end, std::prev(last)->end);
  set.erase(first + 1, last);
}

// The usual bottom-up decomposition: the maximal nodes inside the range, whose ancestors all lie on the paths
// from its first and last leaves.
ArenaOccupancy::Nodes ArenaOccupancy::decompose(int first_op, int last_op) const {
  Nodes nodes;
  for (int lo = first_op + leaves_, hi = last_op + leaves_ + 1; lo < hi; lo /= 2, hi /= 2) {
    if (lo % 2 == 1) nodes.cover[nodes.covers++] = lo++;
    if (hi % 2 == 1) nodes.cover[nodes.covers++] = --hi;
  }
  for (int a = first_op + leaves_, b = last_op + leaves_; a >= 1; a /= 2, b /= 2) {
    nodes.path[nodes.paths++] = a;
    if (b != a) nodes.path[nodes.paths++] = b;
  }
  return nodes;
}

void ArenaOccupancy::place(int first_op, int last_op, int64_t begin, int64_t end) {
  const Nodes nodes = decompose(first_op, last_op);
  for (int i = 0; i < nodes.covers; ++i) {
    add(whole_[nodes.cover[i]], begin, end);
    add(within_[nodes.cover[i]], begin, end);
  }
  for (int i = 0; i < nodes.paths; ++i) add(within_[nodes.path[i]], begin, end);
}

int64_t ArenaOccupancy::lowest_free(int first_op, int last_op, int64_t size) const {
  const Nodes nodes = decompose(first_op, last_op);
  std::array<const Intervals*, 4 * kMaxDepth> held;
  size_t sets = 0;
  for (int i = 0; i < nodes.covers; ++i)
    if (!within_[nodes.cover[i]].empty()) held[sets++] = &within_[nodes.cover[i]];
  for (int i = 0; i < nodes.paths; ++i)
    if (!whole_[nodes.path[i]].empty()) held[sets++] = &whole_[nodes.path[i]];
  // Raise the offset past each interval it overlaps until no set has one: each step skips a whole merged run.
  int64_t offset = 0;
  for (size_t i = 0, unmoved = 0; unmoved < sets;) {
    const Intervals& set = *held[i];
    const auto it = first_ending_after(set, offset);
    if (it != set.end() && it->begin < checked_add(offset, size)) {
      offset = it->end;
      unmoved = 0;  // this set again: its next interval may start within `size`
    } else {
      ++unmoved;
      i = (i + 1) % sets;
    }
  }
  return offset;
}

}  // namespace mt
