// The offloaded optimizer state against the in-memory one: the same windows' contents after writes, reads and
// updates, chunked into uneven pieces, and the file created, sized and removed as promised.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "memory/allocation.h"
#include "memory/offloaded_state.h"
#include "memory_test_util.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::three_params;

constexpr ModelStatePolicy kBf16WithMaster{
    .weights = DType::bf16, .grads = DType::f32, .moments = DType::bf16, .master_weights = true};

float master_value(int64_t g) {
  return 0.25f * static_cast<float>(g) - 1.0f;
}
bf16 moment_value(int64_t g, int which) {
  return round_to<bf16>(static_cast<float>(g * (which + 2)));
}

// Writes master(g) over [begin, end), then the moments with an update visit, through `state`.
void fill(OptimizerState& state, int64_t begin, int64_t end) {
  state.visit(begin, end, StateAccess::write_master, [](const StateWindow& w) {
    for (int64_t g = w.begin; g < w.end; ++g) w.master[g - w.begin] = master_value(g);
  });
  state.visit(begin, end, StateAccess::update, [](const StateWindow& w) {
    for (int64_t g = w.begin; g < w.end; ++g) {
      static_cast<bf16*>(w.m)[g - w.begin] = moment_value(g, 0);
      static_cast<bf16*>(w.v)[g - w.begin] = moment_value(g, 1);
    }
  });
}

// Every element of [begin, end) as (master, m, v) bits, read with an update visit (which writes it back).
std::vector<uint32_t> contents(OptimizerState& state, int64_t begin, int64_t end,
                               std::vector<std::pair<int64_t, int64_t>>* windows = nullptr) {
  std::vector<uint32_t> out;
  state.visit(begin, end, StateAccess::update, [&](const StateWindow& w) {
    if (windows) windows->emplace_back(w.begin, w.end);
    for (int64_t i = 0; i < w.end - w.begin; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &w.master[i], 4);
      out.push_back(bits);
      out.push_back(static_cast<bf16*>(w.m)[i].bits);
      out.push_back(static_cast<bf16*>(w.v)[i].bits);
    }
  });
  return out;
}

TEST(OptimizerOffload, PlanHoldsTwoChunkSlotsAndReportsTheFileBytes) {
  TempDir dir("offload-test");
  const TensorTable t = three_params();
  const Plan plan = make_plan(t, testing::kAlignment, kBf16WithMaster, {},
                              {.enabled = true, .path = dir.path, .chunk_elems = 4});
  EXPECT_EQ(plan.bytes[Category::master], 2 * 4 * 4);
  EXPECT_EQ(plan.bytes[Category::optim], 2 * 2 * 4 * 2);
  EXPECT_EQ(plan.offloaded_bytes, 25 * (4 + 2 + 2));
  const Plan big_chunks = make_plan(t, testing::kAlignment, kBf16WithMaster, {},
                                    {.enabled = true, .path = dir.path, .chunk_elems = 1000});
  EXPECT_EQ(big_chunks.offload.chunk_elems, 25);  // never more than the shard
}

TEST(OptimizerOffload, RoundTripsInUnevenChunksLikeTheInMemoryState) {
  TempDir dir("offload-test");
  const TensorTable t = three_params();
  const Plan in_memory_plan = make_plan(t, testing::kAlignment, kBf16WithMaster);
  const Plan offload_plan = make_plan(t, testing::kAlignment, kBf16WithMaster, {},
                                      {.enabled = true, .path = dir.path, .chunk_elems = 4});
  Allocation in_memory(t, in_memory_plan, testing::cpu_backend(in_memory_plan.policy)),
      offloaded(t, offload_plan, testing::cpu_backend(offload_plan.policy));
  const fs::path file = dir.path / "memtrain-optimizer.rank0.bin";
  ASSERT_TRUE(fs::exists(file));
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(file)), offload_plan.offloaded_bytes);
  fill(in_memory.optimizer_state(), 0, 25);
  fill(offloaded.optimizer_state(), 0, 25);

  std::vector<std::pair<int64_t, int64_t>> windows;
  const std::vector<uint32_t> expected = contents(in_memory.optimizer_state(), 0, 25);
  EXPECT_EQ(contents(offloaded.optimizer_state(), 0, 25, &windows), expected);
  const std::vector<std::pair<int64_t, int64_t>> chunks = {{0, 4},   {4, 8},   {8, 12}, {12, 16},
                                                           {16, 20}, {20, 24}, {24, 25}};
  EXPECT_EQ(windows, chunks);
  // A range that starts inside a chunk: windows start at the range, not at a fixed grid.
  windows.clear();
  EXPECT_EQ(contents(offloaded.optimizer_state(), 3, 14, &windows),
            contents(in_memory.optimizer_state(), 3, 14));
  EXPECT_EQ(windows, (std::vector<std::pair<int64_t, int64_t>>{{3, 7}, {7, 11}, {11, 14}}));

  // Overwriting part of the master leaves the moments and the rest of the master as they were.
  for (OptimizerState* state : {&in_memory.optimizer_state(), &offloaded.optimizer_state()})
    state->visit(5, 19, StateAccess::write_master, [](const StateWindow& w) {
      for (int64_t g = w.begin; g < w.end; ++g) w.master[g - w.begin] = -master_value(g);
    });
  EXPECT_EQ(contents(offloaded.optimizer_state(), 0, 25), contents(in_memory.optimizer_state(), 0, 25));
  std::vector<float> read_back;
  offloaded.optimizer_state().visit(0, 25, StateAccess::read_master, [&](const StateWindow& w) {
    read_back.insert(read_back.end(), w.master, w.master + (w.end - w.begin));
  });
  for (int64_t g = 0; g < 25; ++g)
    EXPECT_EQ(read_back[g], (g >= 5 && g < 19 ? -1 : 1) * master_value(g)) << g;
}

TEST(OptimizerOffload, MomentsStartAtZeroAndTheFileIsRemovedAtTheEnd) {
  TempDir dir("offload-test");
  const TensorTable t = three_params();
  const Plan plan = make_plan(t, testing::kAlignment, kBf16WithMaster, {},
                              {.enabled = true, .path = dir.path, .chunk_elems = 3});
  {
    Allocation memory(t, plan, testing::cpu_backend(plan.policy));
    for (uint32_t bits : contents(memory.optimizer_state(), 0, 25)) EXPECT_EQ(bits, 0u);
  }
  EXPECT_TRUE(fs::is_empty(dir.path));
}

TEST(OptimizerOffload, ShardedRankStreamsOnlyItsShard) {
  TempDir dir("offload-test");
  const TensorTable t = three_params();
  const Sharding rank1{.dp = 2, .dp_rank = 1, .stage = 1, .bucket_elems = 8};
  const Plan plan = make_plan(t, testing::kAlignment, kBf16WithMaster, rank1,
                              {.enabled = true, .path = dir.path, .chunk_elems = 5});
  const Plan reference_plan = make_plan(t, testing::kAlignment, kBf16WithMaster, rank1);
  Allocation memory(t, plan, testing::cpu_backend(plan.policy)),
      reference(t, reference_plan, testing::cpu_backend(reference_plan.policy));
  EXPECT_TRUE(fs::exists(dir.path / "memtrain-optimizer.rank1.bin"));
  EXPECT_EQ(plan.offloaded_bytes, 13 * 8);
  fill(memory.optimizer_state(), 13, 25);
  fill(reference.optimizer_state(), 13, 25);
  EXPECT_EQ(contents(memory.optimizer_state(), 13, 25), contents(reference.optimizer_state(), 13, 25));
  EXPECT_THROW(memory.optimizer_state().visit(0, 25, StateAccess::read_master, [](const StateWindow&) {}),
               std::logic_error);
}

TEST(OptimizerOffload, MissingDirectoryIsADataErrorNamingIt) {
  TempDir dir("offload-test");
  const TensorTable t = three_params();
  const std::string missing = (dir.path / "nope").string();
  const Plan plan = make_plan(t, testing::kAlignment, kBf16WithMaster, {},
                              {.enabled = true, .path = missing, .chunk_elems = 4});
  try {
    Allocation memory(t, plan, testing::cpu_backend(plan.policy));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(missing));
}

}  // namespace
}  // namespace mt
