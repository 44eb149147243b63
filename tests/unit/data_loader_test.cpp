#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "data/loader.h"
#include "data_test_util.h"

namespace mt {
namespace {

// Shards whose tokens are their positions in one stream (mod vocab), so every window is identifiable.
struct Shards {
  test::TempDir dir;
  std::vector<std::string> paths;
  std::vector<uint16_t> stream;
  explicit Shards(const std::vector<int64_t>& sizes) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::vector<uint16_t> tokens(sizes[s]);
      for (uint16_t& t : tokens) t = static_cast<uint16_t>(stream.size() % 1000), stream.push_back(t);
      paths.push_back(dir.file("d_train_00000" + std::to_string(s) + ".bin"));
      write_shard(paths.back(), tokens);
    }
  }
};

LoaderConfig config(int64_t b, int64_t t, bool shuffle, uint64_t seed) {
  return LoaderConfig{.batch = b, .seq_len = t, .shuffle = shuffle, .seed = seed, .vocab_size = 1000};
}

// The first input token of each batch in one epoch: it identifies the window.
std::vector<int32_t> epoch_starts(Loader& loader, int64_t bt) {
  std::vector<int32_t> in(bt), tg(bt), starts;
  const int64_t epoch = loader.cursor().epoch;
  while (loader.cursor().epoch == epoch) {
    loader.next_batch(in.data(), tg.data());
    starts.push_back(in[0]);
  }
  return starts;
}

TEST(DataLoader, InOrderWindowsAreTheStreamShiftedByOne) {
  Shards shards({23, 9});  // windows of B*T = 2*3: 3 in the first shard, 1 in the second
  const LoaderConfig cfg = config(2, 3, false, 0);
  std::vector<uint16_t> buffer(Loader::window_tokens(cfg));
  Loader loader(shards.paths, cfg, buffer.data());
  EXPECT_EQ(loader.windows_in_shard(0), 3);
  EXPECT_EQ(loader.windows_in_shard(1), 1);
  std::vector<int32_t> in(6), tg(6);
  for (int64_t shard_start : {0, 23}) {
    for (int64_t w = 0; w < loader.windows_in_shard(shard_start ? 1 : 0); ++w) {
      loader.next_batch(in.data(), tg.data());
      for (int64_t i = 0; i < 6; ++i) {
        ASSERT_EQ(in[i], shards.stream[shard_start + w * 6 + i]);
        ASSERT_EQ(tg[i], shards.stream[shard_start + w * 6 + i + 1]);
      }
    }
  }
  EXPECT_EQ(loader.cursor().epoch, 1);
  EXPECT_EQ(loader.cursor().shard, 0);
  loader.next_batch(in.data(), tg.data());
  EXPECT_EQ(in[0], shards.stream[0]);
}

TEST(DataLoader, ShuffleVisitsEachWindowOncePerEpochDeterministically) {
  const std::vector<int64_t> sizes = {41, 25, 61};  // 10 + 6 + 15 windows of 4
  Shards shards(sizes);
  const LoaderConfig cfg = config(1, 4, true, 7);
  std::vector<uint16_t> buffer(Loader::window_tokens(cfg));
  Loader a(shards.paths, cfg, buffer.data());
  std::set<int32_t> expected;
  for (int64_t s = 0, start = 0; s < 3; start += sizes[s], ++s) {
    for (int64_t w = 0; w < (sizes[s] - 1) / 4; ++w) expected.insert(shards.stream[start + w * 4]);
  }
  const std::vector<int32_t> e0 = epoch_starts(a, 4), e1 = epoch_starts(a, 4);
  EXPECT_EQ(e0.size(), 31u);
  EXPECT_EQ(std::set<int32_t>(e0.begin(), e0.end()), expected);
  EXPECT_EQ(std::set<int32_t>(e1.begin(), e1.end()), expected);
  EXPECT_NE(e0, e1);
  std::vector<int32_t> in_order(e0);
  std::sort(in_order.begin(), in_order.end());
  EXPECT_NE(e0, in_order);

  Loader same(shards.paths, cfg, buffer.data());
  EXPECT_EQ(epoch_starts(same, 4), e0);
  Loader other(shards.paths, config(1, 4, true, 8), buffer.data());
  EXPECT_NE(epoch_starts(other, 4), e0);
}

TEST(DataLoader, RestoredCursorContinuesIdentically) {
  Shards shards({41, 25});
  const LoaderConfig cfg = config(2, 2, true, 3);
  std::vector<uint16_t> buffer(Loader::window_tokens(cfg));
  Loader a(shards.paths, cfg, buffer.data());
  std::vector<int32_t> in(4), tg(4), in2(4), tg2(4);
  for (int i = 0; i < 13; ++i) a.next_batch(in.data(), tg.data());
  const LoaderCursor saved = a.cursor();
  Loader b(shards.paths, cfg, buffer.data());
  b.set_cursor(saved);
  for (int i = 0; i < 30; ++i) {
    a.next_batch(in.data(), tg.data());
    b.next_batch(in2.data(), tg2.data());
    ASSERT_EQ(in, in2);
    ASSERT_EQ(tg, tg2);
  }
  test::expect_data_error([&] { b.set_cursor({0, 2, 0}); }, "loader cursor (epoch 0, shard 2, window 0)");
  test::expect_data_error([&] { b.set_cursor({0, 0, 100}); }, "out of range");
  test::expect_data_error([&] { b.set_cursor({-1, 0, 0}); }, "out of range");
}

TEST(DataLoader, BadTokensAndShortShardsNameTheFile) {
  test::TempDir dir;
  const std::string path = dir.file("d_train_000000.bin");
  std::vector<uint16_t> tokens(50, 5);
  tokens[37] = 1000;
  write_shard(path, tokens);
  const LoaderConfig cfg = config(1, 4, false, 0);
  std::vector<uint16_t> buffer(Loader::window_tokens(cfg));
  test::expect_data_error([&] { Loader(std::vector<std::string>{path}, cfg, buffer.data()); },
                          path + ": token 1000 at position 37");
  write_shard(path, {1, 2, 3});
  test::expect_data_error([&] { Loader(std::vector<std::string>{path}, cfg, buffer.data()); },
                          path + ": 3 tokens, fewer than one window");
}

}  // namespace
}  // namespace mt
