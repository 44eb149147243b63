// 8-bit block-quantized Adam moments in the memory plan, the optimizer state and the checkpoint's rank files:
// ZeRO shards and offload chunks cut on whole blocks (the padding planned), the fp32 scales counted and
// streamed, save ranges cut on the same blocks, and a scale tensor read back across a different world.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "core/error.h"
#include "memory/allocation.h"
#include "memory/plan.h"
#include "memory/precision.h"
#include "memory_test_util.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::three_params;

// 5000 fp32 parameters: two whole int8 blocks of 2048 and a short last one of 904.
TensorTable params_of_5000() {
  TensorTable t;
  t.add({"w", {40, 100}, DType::f32, Category::params});
  t.add({"b", {1000}, DType::f32, Category::params});
  return t;
}

ModelStatePolicy int8_moments() {
  PrecisionConfig config;
  config.set_moments(MomentDType::int8);
  return model_state_policy(config);
}

// u8 moments with blocks of 4 over three tensors of 7, 13 and 5 (25): small enough to check element by
// element.
constexpr ModelStatePolicy kBlocksOf4{.weights = DType::bf16,
                                      .grads = DType::f32,
                                      .moments = DType::u8,
                                      .moment_block = 4,
                                      .master_weights = true};

TEST(BlockedMoments, PolicyBlocksAreThoseOfTheKernels) {
  const ModelStatePolicy int8 = int8_moments();
  EXPECT_EQ(int8.moments, DType::u8);
  EXPECT_EQ(int8.moment_block, 2048);
  PrecisionConfig config;
  config.set_moments(MomentDType::fp8);
  const ModelStatePolicy fp8 = model_state_policy(config);
  EXPECT_EQ(fp8.moments, DType::f8_e4m3);
  EXPECT_EQ(fp8.moment_block, 128);
  EXPECT_EQ(int8.moment_scales(5000), 3);
  EXPECT_EQ(int8.moment_scales(4096), 2);
  EXPECT_EQ(ModelStatePolicy{}.moment_scales(5000), 0);
}

TEST(BlockedMoments, OneProcessPlansEveryMomentByteAndAScalePerBlockBegun) {
  const Plan plan = make_plan(params_of_5000(), testing::kAlignment, int8_moments());
  EXPECT_EQ(plan.num_params, 5000);
  EXPECT_EQ(plan.shard_elems, 5000);  // unsharded: no padding
  EXPECT_EQ(plan.moment_scales, 3);
  EXPECT_EQ(plan.bytes[Category::optim], 2 * (5000 * 1 + 3 * 4));
  EXPECT_EQ(plan.bytes[Category::master], 0);
}

TEST(BlockedMoments, ZeroShardsAreWholeBlocksAndThePaddingIsPlanned) {
  const TensorTable t = params_of_5000();
  struct Case {
    int world, rank;
    int64_t shard_elems, begin, end;
  };
  // ceil(5000 / 2) = 2500 rounds up to 4096; ceil(5000 / 3) = 1667 and 1250 to 2048; rank 3 of 4 holds none
  // of the parameters but still plans its padded shard.
  for (const Case c : {Case{2, 0, 4096, 0, 4096}, Case{2, 1, 4096, 4096, 5000}, Case{3, 1, 2048, 2048, 4096},
                       Case{3, 2, 2048, 4096, 5000}, Case{4, 3, 2048, 5000, 5000}}) {
    for (int stage : {1, 2, 3}) {
      const Sharding sharding{.dp = c.world, .dp_rank = c.rank, .stage = stage, .bucket_elems = 1024};
      const Plan plan = make_plan(t, testing::kAlignment, int8_moments(), sharding);
      const std::string where = "world " + std::to_string(c.world) + " rank " + std::to_string(c.rank) +
                                " stage " + std::to_string(stage);
      EXPECT_EQ(plan.shard_elems, c.shard_elems) << where;
      EXPECT_EQ(plan.shard_begin, c.begin) << where;
      EXPECT_EQ(plan.shard_end, c.end) << where;
      const int64_t scales = c.shard_elems / 2048;
      EXPECT_EQ(plan.moment_scales, scales) << where;
      EXPECT_EQ(plan.bytes[Category::optim], 2 * (c.shard_elems + scales * 4)) << where;
      EXPECT_EQ(plan.bytes[Category::grads], (stage >= 2 ? c.shard_elems : 5000) * 4) << where;
      EXPECT_EQ(plan.bytes[Category::params], (stage >= 3 ? c.shard_elems : 5000) * 4) << where;
    }
  }
}

TEST(BlockedMoments, OffloadChunksAreWholeBlocksAndTheFileHoldsTheScales) {
  TempDir dir("blocked-plan");
  const TensorTable t = params_of_5000();
  const OptimizerOffload offload{.enabled = true, .path = dir.path, .chunk_elems = 1000};
  const Plan plan = make_plan(t, testing::kAlignment, int8_moments(), {}, offload);
  EXPECT_EQ(plan.offload.chunk_elems, 2048);  // 1000 rounded up to a block
  EXPECT_EQ(plan.state_elems, 2 * 2048);
  EXPECT_EQ(plan.moment_scales, 2 * 1);
  EXPECT_EQ(plan.bytes[Category::optim], 2 * (2 * 2048 + 2 * 4));
  EXPECT_EQ(plan.offloaded_bytes, 5000 * 2 + 3 * 2 * 4);
  // A chunk past the shard is the shard, even when that ends in a short block.
  const Plan whole = make_plan(t, testing::kAlignment, int8_moments(), {},
                               {.enabled = true, .path = dir.path, .chunk_elems = 4097});
  EXPECT_EQ(whole.offload.chunk_elems, 5000);
  EXPECT_EQ(whole.moment_scales, 2 * 3);
  // Sharded: rank 1 of 2 holds [4096, 5000) in a file sized for its padded shard of 4096.
  const Plan rank1 = make_plan(t, testing::kAlignment, int8_moments(),
                               {.dp = 2, .dp_rank = 1, .stage = 1, .bucket_elems = 1024},
                               {.enabled = true, .path = dir.path, .chunk_elems = 3000});
  EXPECT_EQ(rank1.offload.chunk_elems, 4096);
  EXPECT_EQ(rank1.offloaded_bytes, 4096 * 2 + 2 * 2 * 4);
}

TEST(BlockedMoments, SaveRangesAreTheShardsCutOnBlocks) {
  for (int world : {1, 2, 3, 4}) {
    int64_t next = 0;
    for (int r = 0; r < world; ++r) {
      const ckpt::FlatRange range = ckpt::save_range(5000, world, r, 2048);
      const Plan plan = make_plan(params_of_5000(), testing::kAlignment, int8_moments(),
                                  {.dp = world, .dp_rank = r, .stage = 1, .bucket_elems = 1024});
      EXPECT_EQ(range.begin, next) << world << " " << r;
      EXPECT_TRUE(range.size() == 0 || range.begin % 2048 == 0) << world << " " << r;
      EXPECT_EQ(range.begin, plan.shard_begin) << world << " " << r;
      EXPECT_EQ(range.end, plan.shard_end) << world << " " << r;
      next = range.end;
    }
    EXPECT_EQ(next, 5000) << world;
  }
  EXPECT_EQ(ckpt::save_range(5000, 2, 1, 0).begin, 2500);  // no blocks: ceil(n / world)
}

// Rank files of world 3 (blocks of 4, n = 25: ranges [0, 12), [12, 24), [24, 25)) hold the scale of block
// b = b; a world of 2 ([0, 16), [16, 25)) and offload chunks read theirs from whichever files hold them.
TEST(BlockedMoments, ScaleTensorsReadAcrossSavedRanksOfAnotherWorld) {
  TempDir dir("blocked-ranks");
  const ckpt::CheckpointLayout layout{.num_params = {25}, .world = 3, .moment_block = 4, .tensors = {}};
  const ckpt::StateTensor scales{"adam_m_scales", DType::f32, nullptr, 4};
  for (int r = 0; r < layout.world; ++r) {
    const ckpt::FlatRange range = ckpt::save_range(25, layout.world, r, 4);
    std::vector<float> values;
    for (int64_t b = range.begin / 4; b < (range.end + 3) / 4; ++b) values.push_back(static_cast<float>(b));
    SafetensorsWriter writer((dir.path / ckpt::rank_file_name(r)).string(),
                             {{scales.name, DType::f32, {scales.entries(range.begin, range.end)}}});
    writer.write_next(values.data(), values.size() * sizeof(float));
    writer.finish();
  }
  const ckpt::RankFiles files(dir.path.string(), layout);
  for (const ckpt::FlatRange range :
       {ckpt::FlatRange{0, 16}, ckpt::FlatRange{16, 25}, ckpt::FlatRange{8, 16}, ckpt::FlatRange{0, 25}}) {
    std::vector<float> got(static_cast<size_t>(scales.entries(range.begin, range.end)), -1.0f);
    files.read(scales, range, reinterpret_cast<char*>(got.data()));
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], static_cast<float>(range.begin / 4 + static_cast<int64_t>(i)))
          << "[" << range.begin << ", " << range.end << ") entry " << i;
  }
  // Read as unblocked (one entry per element) the stored counts do not match: a data error, not a misread.
  std::vector<float> unused(25);
  EXPECT_THROW(
      files.read({scales.name, DType::f32, nullptr}, {0, 25}, reinterpret_cast<char*>(unused.data())), Error);
}

// Writes every element's master, codes and every block's scales over [begin, end) with an update visit.
void fill_blocked_state(OptimizerState& state, int64_t begin, int64_t end) {
  state.visit(begin, end, StateAccess::update, [](const StateWindow& w) {
    for (int64_t g = w.begin; g < w.end; ++g) {
      w.master[g - w.begin] = 0.5f * static_cast<float>(g);
      static_cast<uint8_t*>(w.m)[g - w.begin] = static_cast<uint8_t>(g + 1);
      static_cast<uint8_t*>(w.v)[g - w.begin] = static_cast<uint8_t>(200 - g);
    }
    for (int64_t b = 0; b < kBlocksOf4.moment_scales(w.end - w.begin); ++b) {
      w.m_scales[b] = static_cast<float>(w.begin / 4 + b) + 0.25f;
      w.v_scales[b] = -static_cast<float>(w.begin / 4 + b);
    }
  });
}

// [begin, end) as (master, m, v) per element, then (m scale, v scale) per block, read with an update visit.
std::vector<float> blocked_state_contents(OptimizerState& state, int64_t begin, int64_t end,
                                          std::vector<std::pair<int64_t, int64_t>>* windows = nullptr) {
  std::vector<float> elements, scales;
  state.visit(begin, end, StateAccess::update, [&](const StateWindow& w) {
    if (windows) windows->emplace_back(w.begin, w.end);
    for (int64_t i = 0; i < w.end - w.begin; ++i)
      elements.insert(elements.end(), {w.master[i], static_cast<float>(static_cast<uint8_t*>(w.m)[i]),
                                       static_cast<float>(static_cast<uint8_t*>(w.v)[i])});
    for (int64_t b = 0; b < kBlocksOf4.moment_scales(w.end - w.begin); ++b)
      scales.insert(scales.end(), {w.m_scales[b], w.v_scales[b]});
  });
  elements.insert(elements.end(), scales.begin(), scales.end());
  return elements;
}

TEST(BlockedMoments, OffloadedStateStreamsWholeBlocksAndTheirScales) {
  TempDir dir("blocked-offload");
  const TensorTable t = three_params();
  const Plan in_memory_plan = make_plan(t, testing::kAlignment, kBlocksOf4);
  const Plan offload_plan = make_plan(t, testing::kAlignment, kBlocksOf4, {},
                                      {.enabled = true, .path = dir.path, .chunk_elems = 5});
  ASSERT_EQ(offload_plan.offload.chunk_elems, 8);
  EXPECT_EQ(offload_plan.offloaded_bytes, 25 * (4 + 2) + 7 * 2 * 4);
  Allocation in_memory(t, in_memory_plan, testing::cpu_backend(in_memory_plan.policy)),
      offloaded(t, offload_plan, testing::cpu_backend(offload_plan.policy));
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(dir.path / "memtrain-optimizer.rank0.bin")),
            offload_plan.offloaded_bytes);
  for (float value : blocked_state_contents(offloaded.optimizer_state(), 0, 25))
    EXPECT_EQ(value, 0.0f);  // a fresh state
  fill_blocked_state(in_memory.optimizer_state(), 0, 25);
  fill_blocked_state(offloaded.optimizer_state(), 0, 25);
  std::vector<std::pair<int64_t, int64_t>> windows;
  const std::vector<float> expected = blocked_state_contents(in_memory.optimizer_state(), 0, 25);
  EXPECT_EQ(blocked_state_contents(offloaded.optimizer_state(), 0, 25, &windows), expected);
  EXPECT_EQ(windows, (std::vector<std::pair<int64_t, int64_t>>{{0, 8}, {8, 16}, {16, 24}, {24, 25}}));
  // From a later block: the scales of blocks 3 on.
  EXPECT_EQ(blocked_state_contents(offloaded.optimizer_state(), 12, 25),
            blocked_state_contents(in_memory.optimizer_state(), 12, 25));
  // Rewriting the master keeps the moments and their scales.
  for (OptimizerState* state : {&in_memory.optimizer_state(), &offloaded.optimizer_state()})
    state->visit(3, 19, StateAccess::write_master, [](const StateWindow& w) {
      for (int64_t g = w.begin; g < w.end; ++g) w.master[g - w.begin] = -1.0f;
    });
  EXPECT_EQ(blocked_state_contents(offloaded.optimizer_state(), 0, 25),
            blocked_state_contents(in_memory.optimizer_state(), 0, 25));
  // The moments are visited from a block's start only: anything else would misplace the scales.
  for (OptimizerState* state : {&in_memory.optimizer_state(), &offloaded.optimizer_state()})
    EXPECT_THROW(state->visit(3, 14, StateAccess::update, [](const StateWindow&) {}), std::logic_error);
}

TEST(BlockedMoments, OffloadedShardOfRankOneStreamsItsBlocks) {
  TempDir dir("blocked-offload-rank1");
  const TensorTable t = three_params();
  // ceil(25 / 2) = 13 rounds up to 16: rank 1 holds [16, 25), two blocks, the last of one element.
  const Sharding rank1{.dp = 2, .dp_rank = 1, .stage = 2, .bucket_elems = 8};
  const Plan plan = make_plan(t, testing::kAlignment, kBlocksOf4, rank1,
                              {.enabled = true, .path = dir.path, .chunk_elems = 4});
  const Plan reference_plan = make_plan(t, testing::kAlignment, kBlocksOf4, rank1);
  ASSERT_EQ(plan.shard_begin, 16);
  EXPECT_EQ(plan.offloaded_bytes, 16 * (4 + 2) + 4 * 2 * 4);
  Allocation offloaded(t, plan, testing::cpu_backend(plan.policy)),
      reference(t, reference_plan, testing::cpu_backend(reference_plan.policy));
  fill_blocked_state(offloaded.optimizer_state(), 16, 25);
  fill_blocked_state(reference.optimizer_state(), 16, 25);
  std::vector<std::pair<int64_t, int64_t>> windows;
  EXPECT_EQ(blocked_state_contents(offloaded.optimizer_state(), 16, 25, &windows),
            blocked_state_contents(reference.optimizer_state(), 16, 25));
  EXPECT_EQ(windows, (std::vector<std::pair<int64_t, int64_t>>{{16, 20}, {20, 24}, {24, 25}}));
}

}  // namespace
}  // namespace mt
