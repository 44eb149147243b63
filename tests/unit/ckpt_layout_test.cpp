#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <vector>

#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace mt::ckpt {
namespace {

TEST(CheckpointLayout, SaveRangesCoverEveryParameterOnce) {
  for (int64_t n : {1, 7, 100, 101}) {
    for (int world : {1, 2, 3, 8}) {
      std::vector<int> written(n, 0);
      for (int r = 0; r < world; ++r) {
        const FlatRange range = save_range(n, world, r, 1);
        for (int64_t i = range.begin; i < range.end; ++i) ++written[i];
      }
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(written[i], 1) << "n " << n << " world " << world << " i " << i;
    }
  }
  EXPECT_EQ(checkpoint_name(12), "step_00000012");
  EXPECT_EQ(hidden_name(12, "tmp"), ".step_00000012.tmp");
}

TEST(CheckpointLayout, ListsCheckpointsNewestFirst) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "ckpt_layout_list";
  std::filesystem::remove_all(dir);
  for (const char* name : {"step_00000002", "step_00000010", ".step_00000011.tmp", "notes", "step_00000009"})
    std::filesystem::create_directories(dir / name);
  const std::vector<std::string> found = list_checkpoints(dir.string());
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(std::filesystem::path(found[0]).filename(), "step_00000010");
  EXPECT_EQ(std::filesystem::path(found[2]).filename(), "step_00000002");
  EXPECT_TRUE(is_checkpoint_dir((dir / "step_00000002").string() + "/"));
  EXPECT_FALSE(is_checkpoint_dir(dir.string()));
  EXPECT_TRUE(list_checkpoints((dir / "absent").string()).empty());
  std::filesystem::remove_all(dir);
}

// Rank files of world 3 hold element i = i; any range reads back from the files it spans (resharding).
TEST(CheckpointLayout, RankFilesReadAnyRangeAcrossSavedRanks) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "ckpt_layout_ranks";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int64_t n = 101;
  CheckpointLayout layout;
  layout.num_params = {n};
  layout.world = 3;
  for (int r = 0; r < layout.world; ++r) {
    const FlatRange range = save_range(n, layout.world, r, 1);
    std::vector<float> values(range.size());
    std::iota(values.begin(), values.end(), static_cast<float>(range.begin));
    SafetensorsWriter writer((dir / rank_file_name(r)).string(), {{"master", DType::f32, {range.size()}}});
    writer.write_next(values.data(), values.size() * sizeof(float));
    writer.finish();
  }
  const RankFiles files(dir.string(), layout);
  for (const FlatRange range : {FlatRange{0, n}, FlatRange{30, 40}, FlatRange{33, 69}, FlatRange{100, 101}}) {
    std::vector<float> got(range.size(), -1.0f);
    files.read({"master", DType::f32, nullptr}, range, reinterpret_cast<char*>(got.data()));
    for (int64_t i = 0; i < range.size(); ++i) EXPECT_EQ(got[i], static_cast<float>(range.begin + i));
  }
  std::vector<float> unused(n);
  EXPECT_THROW(files.read({"adam_m", DType::f32, nullptr}, {0, n}, reinterpret_cast<char*>(unused.data())),
               Error);
  EXPECT_THROW(files.read({"master", DType::bf16, nullptr}, {0, n}, reinterpret_cast<char*>(unused.data())),
               Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mt::ckpt
