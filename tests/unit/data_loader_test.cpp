#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "data/loader.h"
#include "data_test_util.h"
#include "layout/run_layout.h"

namespace mt {
namespace {

// Shards whose tokens are their positions in one stream (mod 1000, plus `base`), so every window is
// identifiable; shard s made by made_by[s] (16-bit ids when not given).
struct Shards {
  test::TempDir dir;
  std::vector<std::string> paths;
  std::vector<int32_t> stream;
  explicit Shards(const std::vector<int64_t>& sizes, int32_t base = 0,
                  const std::vector<ShardTokenizer>& made_by = {}) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::vector<int32_t> tokens(sizes[s]);
      for (int32_t& t : tokens) t = base + static_cast<int32_t>(stream.size() % 1000), stream.push_back(t);
      paths.push_back(dir.file("d_train_00000" + std::to_string(s) + ".bin"));
      write_shard(paths.back(), tokens, s < made_by.size() ? made_by[s] : ShardTokenizer{});
    }
  }
};

LoaderConfig loader_config(int64_t t, bool shuffle, uint64_t seed) {
  return LoaderConfig{.seq_len = t, .shuffle = shuffle, .seed = seed, .vocab_size = 1000};
}

// Rows of samples [first, first + count): inputs, then targets.
std::vector<int32_t> rows(Loader& loader, int64_t t, int64_t first, int64_t count) {
  std::vector<int32_t> in(count * t), tg(count * t);
  loader.read(first, count, {.inputs = in.data(), .targets = tg.data()});
  in.insert(in.end(), tg.begin(), tg.end());
  return in;
}

// The first input token of each sample of epoch `epoch`: it identifies the sample.
std::vector<int32_t> epoch_starts(Loader& loader, int64_t t, int64_t epoch) {
  std::vector<int32_t> starts;
  const int64_t n = loader.samples_per_epoch();
  for (int64_t g = epoch * n; g < (epoch + 1) * n; ++g) starts.push_back(rows(loader, t, g, 1)[0]);
  return starts;
}

TEST(DataLoader, InOrderSamplesAreTheStreamShiftedByOne) {
  Shards shards({23, 9});  // samples of T = 3: 7 in the first shard, 2 in the second
  const LoaderConfig cfg = loader_config(3, false, 0);
  std::vector<uint16_t> buffer(Loader::window_tokens(cfg));
  Loader loader(shards.paths, cfg, buffer.data());
  ASSERT_EQ(loader.samples_per_epoch(), 9);
  const std::vector<int32_t> all = rows(loader, 3, 0, 9);
  for (int64_t row = 0; row < 9; ++row) {
    const int64_t start = row < 7 ? row * 3 : 23 + (row - 7) * 3;
    for (int64_t i = 0; i < 3; ++i) {
      ASSERT_EQ(all[row * 3 + i], shards.stream[start + i]);
      ASSERT_EQ(all[27 + row * 3 + i], shards.stream[start + i + 1]);
    }
  }
  EXPECT_EQ(rows(loader, 3, 9, 1)[0], shards.stream[0]);  // the next epoch starts over
}

TEST(DataLoader, ShuffleVisitsEachSampleOncePerEpochDeterministically) {
  const std::vector<int64_t> sizes = {41, 25, 61};  // 10 + 6 + 15 samples of 4
  Shards shards(sizes);
  const LoaderConfig cfg = loader_config(4, true, 7);
  std::vector<uint16_t> buffer(Loader::window_tokens(cfg));
  Loader a(shards.paths, cfg, buffer.data());
  std::set<int32_t> expected;
  for (int64_t s = 0, start = 0; s < 3; start += sizes[s], ++s) {
    for (int64_t w = 0; w < (sizes[s] - 1) / 4; ++w) expected.insert(shards.stream[start + w * 4]);
  }
  const std::vector<int32_t> e0 = epoch_starts(a, 4, 0), e1 = epoch_starts(a, 4, 1);
  EXPECT_EQ(e0.size(), 31u);
  EXPECT_EQ(std::set<int32_t>(e0.begin(), e0.end()), expected);
  EXPECT_EQ(std::set<int32_t>(e1.begin(), e1.end()), expected);
  EXPECT_NE(e0, e1);
  std::vector<int32_t> in_order(e0);
  std::sort(in_order.begin(), in_order.end());
  EXPECT_NE(e0, in_order);
  // One shard at a time: the shard (its first stream position) changes only twice in an epoch.
  const auto shard_of = [&](int32_t token) { return token < 41 ? 0 : token < 66 ? 1 : 2; };
  int changes = 0;
  for (size_t i = 1; i < e0.size(); ++i) changes += shard_of(e0[i]) != shard_of(e0[i - 1]);
  EXPECT_EQ(changes, 2);

  Loader same(shards.paths, cfg, buffer.data());
  EXPECT_EQ(epoch_starts(same, 4, 1), e1);  // random access: epoch 1 without reading epoch 0
  Loader other(shards.paths, loader_config(4, true, 8), buffer.data());
  EXPECT_NE(epoch_starts(other, 4, 0), e0);
}

// Which samples a step reads is a function of their global numbers only: reading a global batch as one
// micro-batch or as several gives the same rows, across an epoch's end too.
TEST(DataLoader, AStepsSamplesDoNotDependOnItsSplit) {
  Shards shards({41, 25});
  const LoaderConfig cfg = loader_config(2, true, 3);
  std::vector<uint16_t> buffer(Loader::window_tokens(cfg));
  Loader loader(shards.paths, cfg, buffer.data());
  const int64_t first = loader.samples_per_epoch() - 5, global_batch = 12;
  const std::vector<int32_t> whole = rows(loader, 2, first, global_batch);
  for (int64_t b : {1, 2, 3, 4, 6}) {
    std::vector<int32_t> inputs;
    for (int64_t at = first; at < first + global_batch; at += b) {
      const std::vector<int32_t> part = rows(loader, 2, at, b);
      inputs.insert(inputs.end(), part.begin(), part.begin() + b * 2);
    }
    EXPECT_EQ(inputs, std::vector<int32_t>(whole.begin(), whole.begin() + global_batch * 2)) << "b=" << b;
  }
  EXPECT_EQ(loader.count_targets(first, global_batch), global_batch * 2);  // no masks: every target
  test::expect_data_error([&] { rows(loader, 2, -1, 1); }, "sample -1 is out of range");
}

TEST(DataLoader, BadTokensAndShortShardsNameTheFile) {
  test::TempDir dir;
  const std::string path = dir.file("d_train_000000.bin");
  std::vector<int32_t> tokens(50, 5);
  tokens[37] = 1000;
  write_shard(path, tokens);
  const LoaderConfig cfg = loader_config(4, false, 0);
  std::vector<uint16_t> buffer(Loader::window_tokens(cfg));
  test::expect_data_error([&] { Loader(std::vector<std::string>{path}, cfg, buffer.data()); },
                          path + ": token 1000 at position 37");
  write_shard(path, {1, 2, 3});
  test::expect_data_error([&] { Loader(std::vector<std::string>{path}, cfg, buffer.data()); },
                          path + ": 3 tokens, fewer than one sample");
}

// Every sample of an in-order epoch: the stream shifted by one, whatever width each shard stores.
void expect_in_order_rows(Loader& loader, const Shards& shards, int64_t t,
                          const std::vector<int64_t>& sizes) {
  int64_t row = 0, shard_start = 0;
  for (const int64_t size : sizes) {
    for (int64_t k = 0; k < Loader::samples_in_shard(size, t); ++k, ++row) {
      const std::vector<int32_t> got = rows(loader, t, row, 1);
      const auto at = shards.stream.begin() + shard_start + k * t;
      ASSERT_EQ(std::vector<int32_t>(got.begin(), got.begin() + t), std::vector<int32_t>(at, at + t)) << row;
      ASSERT_EQ(std::vector<int32_t>(got.begin() + t, got.end()), std::vector<int32_t>(at + 1, at + t + 1))
          << row;
    }
    shard_start += size;
  }
  EXPECT_EQ(row, loader.samples_per_epoch());
}

// A vocabulary past 16 bits: 32-bit shards beside a 16-bit one, read through a window of 4-byte ids.
TEST(DataLoader, ReadsThirtyTwoBitShardsBesideSixteenBitOnes) {
  const ShardTokenizer wide{.vocab_size = 70'000, .fingerprint = 0xfeedbeefu};
  const std::vector<int64_t> sizes = {23, 9, 17};
  Shards shards(sizes, 0, {wide, {}, wide});
  ASSERT_EQ(open_shard(shards.paths[0]).token_bytes, 4);
  ASSERT_EQ(open_shard(shards.paths[1]).token_bytes, 2);
  LoaderConfig cfg = loader_config(3, false, 0);
  cfg.vocab_size = 70'000;
  ASSERT_EQ(Loader::window_token_bytes(cfg), 4);
  std::vector<int32_t> buffer(Loader::window_tokens(cfg));
  Loader loader(shards.paths, cfg, buffer.data());
  expect_in_order_rows(loader, shards, 3, sizes);

  // Ids past 65,535, as Qwen3's and Gemma-3's are.
  Shards high(sizes, 69'000, {wide, wide, wide});
  Loader high_loader(high.paths, cfg, buffer.data());
  expect_in_order_rows(high_loader, high, 3, sizes);
  cfg.vocab_size = 69'040;  // the third shard's position 8 holds stream position 40
  test::expect_data_error(
      [&] { Loader(high.paths, cfg, buffer.data()); },
      high.paths[2] + ": token 69040 at position 8 is not below the vocabulary size 69040");
}

// A 32-bit shard under a vocabulary of 16-bit ids (llm.c's LLaMA-3 shards of small ids): the window of 2-byte
// ids holds half a sample of the file's, read in pieces, T odd and even.
TEST(DataLoader, ReadsThirtyTwoBitShardsThroughANarrowWindow) {
  const std::vector<int64_t> sizes = {23, 30};
  Shards shards(sizes, 0, {{.vocab_size = 70'000}, {.vocab_size = 70'000}});
  for (const int64_t t : {1, 4, 7}) {
    SCOPED_TRACE(t);
    const LoaderConfig cfg = loader_config(t, false, 0);
    ASSERT_EQ(Loader::window_token_bytes(cfg), 2);
    std::vector<uint16_t> buffer(Loader::window_tokens(cfg));
    Loader loader(shards.paths, cfg, buffer.data());
    expect_in_order_rows(loader, shards, t, sizes);
  }
}

// The plan holds each loader's window at the width of the model's ids: 2 bytes up to 65,536 ids, 4 past.
TEST(DataLoader, ThePlanHoldsTheWindowAtTheWidthOfTheModelsIds) {
  test::TempDir dir;
  const auto window = [&](int64_t vocab_size) {
    const std::string model = dir.file("vocab" + std::to_string(vocab_size) + ".json");
    test::write_text(model,
                     R"({"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 128, "vocab_size": )" +
                         std::to_string(vocab_size) + "}");
    TrainConfig cfg;
    cfg.model = model;
    cfg.seq_len = 32;
    cfg.train_iters = 1;
    const RunLayout run =
        lay_out_run(cfg, ParallelRank{.dp = 1}, {.cpu_isa = process_cpu_isa(), .threads = 1}, 0);
    const TensorTable& table = run.model.graph.table;
    EXPECT_EQ(table[run.train_window].numel(), 33);
    EXPECT_EQ(table[run.val_window].dtype, table[run.train_window].dtype);
    return table[run.train_window].dtype;
  };
  EXPECT_EQ(window(65'536), DType::u16);
  EXPECT_EQ(window(65'537), DType::i32);
  EXPECT_EQ(window(151'669), DType::i32);
}

}  // namespace
}  // namespace mt
