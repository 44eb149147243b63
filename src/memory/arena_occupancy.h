// Which bytes of an arena the tensors placed so far hold, over the ops of a step, so that packing finds the
// lowest offset free during a whole lifetime without walking every placed tensor: a segment tree over the
// ops whose nodes keep merged address intervals. A lifetime reads O(log ops) nodes, and a run of placed
// tensors that touch one another (the activations every layer saves for its backward) is one interval.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace mt {

class ArenaOccupancy {
 public:
  explicit ArenaOccupancy(int num_ops);

  // Marks bytes [begin, end) as held during ops [first_op, last_op].
  void place(int first_op, int last_op, int64_t begin, int64_t end);

  // The lowest offset at which `size` bytes overlap nothing held during any op of [first_op, last_op].
  int64_t lowest_free(int first_op, int last_op, int64_t size) const;

 private:
  struct Interval {
    int64_t begin, end;
  };
  using Intervals = std::vector<Interval>;  // sorted, disjoint, touching ones merged: runs stay few
  static Intervals::const_iterator first_ending_after(Intervals::const_iterator from,
                                                      Intervals::const_iterator to, int64_t offset);
  static void add(Intervals& set, int64_t begin, int64_t end);

  static constexpr int kMaxDepth = 33;  // levels of a tree over at most 2^31 ops, leaves included
  // The nodes that cover [first_op, last_op] together, and those on the two leaves' paths to the root.
  struct Nodes {
    std::array<int, 2 * kMaxDepth> cover, path;
    int covers = 0, paths = 0;
  };
  Nodes decompose(int first_op, int last_op) const;

  int leaves_ = 1;  // a power of two >= the ops
  // Per node: the intervals of tensors live during all of its ops (placed with it covering them), and of
  // tensors placed through it or a node below it, each live during some op of it. A lifetime's conflicts
  // are the second set of its covering nodes and the first set of the nodes above them.
  std::vector<Intervals> whole_, within_;
};

}  // namespace mt
