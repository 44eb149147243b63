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

// The first interval of [from, to) that ends after `offset`: galloping from `from`, where a rising offset
// usually finds it within a few intervals, then a binary search in the last stride.
ArenaOccupancy::Intervals::const_iterator ArenaOccupancy::first_ending_after(Intervals::const_iterator from,
                                                                             Intervals::const_iterator to,
                                                                             int64_t offset) {
  std::ptrdiff_t stride = 1;
  while (stride < to - from && from[stride].end <= offset) {
    from += stride;
    stride *= 2;
  }
  return std::upper_bound(from, from + std::min(stride, to - from), offset,
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
  // Per set, the first interval that may still overlap: the offset only rises, so it only moves forward.
  std::array<const Intervals*, 4 * kMaxDepth> held;
  std::array<Intervals::const_iterator, 4 * kMaxDepth> next;
  size_t sets = 0;
  const auto hold = [&](const Intervals& set) {
    if (set.empty()) return;
    held[sets] = &set;
    next[sets++] = set.begin();
  };
  for (int i = 0; i < nodes.covers; ++i) hold(within_[nodes.cover[i]]);
  for (int i = 0; i < nodes.paths; ++i) hold(whole_[nodes.path[i]]);
  // Every offset below the end of an interval that [offset, offset + size) overlaps overlaps it too: each
  // round raises the offset to the furthest such end over all sets (a whole merged run each), until a round
  // finds none.
  for (int64_t offset = 0;;) {
    const int64_t end = checked_add(offset, size);
    int64_t past = offset;
    for (size_t i = 0; i < sets; ++i) {
      auto& it = next[i];
      const auto last = held[i]->end();
      if (it != last && it->end <= offset) it = first_ending_after(it, last, offset);
      if (it != last && it->begin < end) past = std::max(past, it->end);
    }
    if (past == offset) return offset;
    offset = past;
  }
}

}  // namespace mt
