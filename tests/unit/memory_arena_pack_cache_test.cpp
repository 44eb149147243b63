#include <gtest/gtest.h>

#include <string>

#include "core/rng.h"
#include "memory/arena_pack_cache.h"
#include "memory/plan.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

// `count` random activations (sizes of `floats` times a small factor, random lifetimes over 40 ops), params
// and a workspace tensor between them, so that the arena's ids are not the table's.
TensorTable random_table(uint64_t seed, int count, int64_t floats) {
  TensorTable table;
  table.add({"w", {64}, DType::f32, Category::params});
  for (int i = 0; i < count; ++i) {
    const int a = static_cast<int>(random_bits(seed, 1, i) % 40),
              b = static_cast<int>(random_bits(seed, 2, i) % 40);
    const int64_t n = static_cast<int64_t>(random_bits(seed, 3, i) % 5) * floats;
    table.add({std::to_string(i), {n}, DType::f32, Category::activations, std::min(a, b), std::max(a, b)});
    if (i % 7 == 0) table.add({std::to_string(i) + ".ws", {16}, DType::f32, Category::workspace, a, a});
  }
  return table;
}

// The cache's answer is pack_arena's sizes, without offsets.
void expect_same_sizes(const ArenaLayout& cached, const ArenaLayout& packed) {
  EXPECT_EQ(cached.size, packed.size);
  EXPECT_EQ(cached.sum_of_tensors, packed.sum_of_tensors);
  EXPECT_TRUE(cached.offset.empty());
}

TEST(ArenaPackCache, EveryAnswerIsPackArenasSizes) {
  ArenaPackCache cache;
  // Each table twice (the second a hit), interleaved with others, and tables whose tensors differ only in
  // size (40 vs 41 floats: the same aligned size, another packing order) or in one lifetime.
  for (int round = 0; round < 2; ++round)
    for (uint64_t seed = 1; seed <= 6; ++seed)
      for (int64_t floats : {40, 41}) {
        const TensorTable table = random_table(seed, 200, floats);
        for (Category category : {Category::activations, Category::workspace})
          expect_same_sizes(cache.pack(table, category, testing::kAlignment),
                            pack_arena(table, category, testing::kAlignment));
      }
  TensorTable moved = random_table(1, 200, 40);
  moved[1].last_op = moved[1].first_op;  // one lifetime shorter than the cached table's
  expect_same_sizes(cache.pack(moved, Category::activations, testing::kAlignment),
                    pack_arena(moved, Category::activations, testing::kAlignment));
  // Another alignment is another packing.
  const TensorTable table = random_table(2, 200, 41);
  expect_same_sizes(cache.pack(table, Category::activations, 4096),
                    pack_arena(table, Category::activations, 4096));
}

// Arenas whose every size is one multiple of a packed arena's (as a larger micro-batch's activations are)
// are that packing scaled, up or down, and pack nothing; one size off the multiple is packed on its own.
TEST(ArenaPackCache, ScaledArenasAreScaledPackings) {
  constexpr int64_t kAlignedFloats = testing::kAlignment / 4;
  ArenaPackCache cache;
  for (int64_t times : {2, 1, 8, 3}) {
    const TensorTable table = random_table(4, 300, times * kAlignedFloats);
    expect_same_sizes(cache.pack(table, Category::activations, testing::kAlignment),
                      pack_arena(table, Category::activations, testing::kAlignment));
    EXPECT_EQ(cache.packed(), 1) << "x" << times;
  }
  TensorTable off = random_table(4, 300, 3 * kAlignedFloats);
  for (int id = 0; id < off.size(); ++id)
    if (off[id].category == Category::activations && off[id].shape[0] > 0) {
      off[id].shape[0] += kAlignedFloats;  // aligned still, but no longer 3 times the first table's
      break;
    }
  expect_same_sizes(cache.pack(off, Category::activations, testing::kAlignment),
                    pack_arena(off, Category::activations, testing::kAlignment));
  EXPECT_EQ(cache.packed(), 2);
}

// make_plan with a cache: the same plan's sizes, for tables that share their arenas and differ elsewhere.
TEST(ArenaPackCache, MakePlanWithACacheSizesMakePlan) {
  ArenaPackCache cache;
  for (int params : {1, 3}) {
    TensorTable table = random_table(3, 100, 40);
    for (int i = 1; i < params; ++i)
      table.add({std::to_string(i) + ".w", {32}, DType::f32, Category::params});
    const Plan cached = make_plan(table, testing::kAlignment, ModelStatePolicy{}, {}, {}, &cache);
    const Plan plain = make_plan(table, testing::kAlignment, ModelStatePolicy{});
    EXPECT_EQ(cached.bytes.total(), plain.bytes.total());
    expect_same_sizes(cached.activations, plain.activations);
    expect_same_sizes(cached.workspace, plain.workspace);
    EXPECT_TRUE(cached.param_offset.empty());
  }
}

}  // namespace
}  // namespace mt
