#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "memory/arena_occupancy.h"
#include "memory/plan.h"
#include "model/model.h"
#include "model_test_util.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

// First fit as pack_arena placed tensors before ArenaOccupancy: every placed tensor walked in address order,
// for each new one. Quadratic, and the layout the faster packing must reproduce byte for byte.
std::vector<int64_t> first_fit_by_walking(const TensorTable& table, const std::vector<int>& order) {
  struct Placed {
    int64_t begin, end;
    int first_op, last_op;
  };
  std::vector<Placed> placed;
  std::vector<int64_t> offsets(table.size(), -1);
  for (int id : order) {
    const TensorDesc& t = table[id];
    const int64_t size = arena_aligned(t.bytes(), testing::kAlignment);
    int64_t offset = 0;
    for (const Placed& p : placed) {
      if (p.first_op > t.last_op || t.first_op > p.last_op) continue;
      if (offset + size <= p.begin) break;
      offset = std::max(offset, p.end);
    }
    offsets[id] = offset;
    const Placed now{offset, offset + size, t.first_op, t.last_op};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), now,
                                   [](const Placed& a, const Placed& b) {
                                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                                   }),
                  now);
  }
  return offsets;
}

// pack_arena's order: largest first, ties by earlier start, then id.
std::vector<int> packing_order(const TensorTable& table, Category category) {
  std::vector<int> order;
  for (int id = 0; id < table.size(); ++id)
    if (table[id].category == category && table[id].has_lifetime()) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (table[a].bytes() != table[b].bytes()) return table[a].bytes() > table[b].bytes();
    if (table[a].first_op != table[b].first_op) return table[a].first_op < table[b].first_op;
    return a < b;
  });
  return order;
}

void expect_same_as_walking(const TensorTable& table, Category category) {
  const ArenaLayout layout = pack_arena(table, category, testing::kAlignment);
  const std::vector<int64_t> walked = first_fit_by_walking(table, packing_order(table, category));
  ASSERT_EQ(layout.offset.size(), walked.size());
  for (int id = 0; id < table.size(); ++id) ASSERT_EQ(layout.offset[id], walked[id]) << table[id].name;
}

TEST(ArenaOccupancy, LowestFreeSkipsWhatIsHeldDuringTheLifetime) {
  ArenaOccupancy held(8);
  held.place(0, 7, 0, 64);     // the whole step
  held.place(2, 3, 64, 192);   // ops 2-3
  held.place(5, 6, 256, 320);  // ops 5-6
  EXPECT_EQ(held.lowest_free(0, 1, 64), 64);
  EXPECT_EQ(held.lowest_free(3, 4, 64), 192);
  EXPECT_EQ(held.lowest_free(3, 5, 64), 192);
  EXPECT_EQ(held.lowest_free(3, 5, 128), 320);
  EXPECT_EQ(held.lowest_free(4, 4, 0), 0);  // an empty tensor fits anywhere
}

TEST(ArenaOccupancy, RandomLifetimesPackAsFirstFitByWalking) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    TensorTable table;
    const int num_ops = 1 + static_cast<int>(random_bits(seed, 0, 0) % 60);
    for (int i = 0; i < 300; ++i) {
      const int a = static_cast<int>(random_bits(seed, 1, i) % num_ops);
      const int b = static_cast<int>(random_bits(seed, 2, i) % num_ops);
      // Few distinct sizes, so that ties and exact fits into holes are common; some empty tensors.
      const int64_t floats = static_cast<int64_t>(random_bits(seed, 3, i) % 7) * 40;
      table.add(
          {std::to_string(i), {floats}, DType::f32, Category::activations, std::min(a, b), std::max(a, b)});
    }
    expect_same_as_walking(table, Category::activations);
  }
}

TEST(ArenaOccupancy, ModelGraphsPackAsFirstFitByWalking) {
  ModelSpec llama = testing::small_gpt2_spec(6);
  llama.arch = Arch::llama;
  llama.n_kv_head = 2;
  llama.tied_head = false;
  for (const ModelSpec& spec : {testing::small_gpt2_spec(6), llama})
    for (RecomputeGranularity granularity :
         {RecomputeGranularity::none, RecomputeGranularity::selective, RecomputeGranularity::full}) {
      StepConfig step;
      step.batch = 2;
      step.seq_len = 16;
      step.device = device_traits({.cpu_isa = process_cpu_isa(), .threads = 2}, step.dtype, step.seq_len,
                                  spec.head_dim());
      step.recompute.granularity = granularity;
      step.recompute.num_layers = 2;
      const ModelGraph model = build_model_graph(spec, step);
      expect_same_as_walking(model.graph.table, Category::activations);
      expect_same_as_walking(model.graph.table, Category::workspace);
    }
}

TEST(MemoryPlan, ByteCountsBeyond64BitsThrowInsteadOfWrapping) {
  TensorTable t;
  const int64_t huge = std::numeric_limits<int64_t>::max() / 4;
  t.add({"too.big", {huge, 8}, DType::f32, Category::activations, 0, 1});
  EXPECT_THROW(t[0].bytes(), SizeOverflow);
  TensorTable sum;
  for (int i = 0; i < 3; ++i) sum.add({std::to_string(i), {huge}, DType::f32, Category::params});
  EXPECT_THROW(make_plan(sum, testing::kAlignment, ModelStatePolicy{}), SizeOverflow);
  TensorTable arena;
  for (int i = 0; i < 3; ++i)
    arena.add({std::to_string(i), {huge / 2}, DType::f32, Category::activations, 0, 1});
  EXPECT_THROW(pack_arena(arena, Category::activations, testing::kAlignment), SizeOverflow);
}

}  // namespace
}  // namespace mt
