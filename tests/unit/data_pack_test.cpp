#include <gtest/gtest.h>

#include <fstream>

#include "data/loader.h"
#include "data/pack.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data_test_util.h"

namespace mt {
namespace {

// Records of the given lengths, token values their record's number, every token after the first counted.
TokenStream records_of(const std::vector<int64_t>& lengths) {
  TokenStream s;
  for (size_t r = 0; r < lengths.size(); ++r) {
    s.record_starts.push_back(static_cast<int64_t>(s.tokens.size()));
    s.record_lines.push_back(static_cast<int64_t>(r + 1));
    for (int64_t i = 0; i < lengths[r]; ++i) {
      s.tokens.push_back(static_cast<int32_t>(r + 1));
      s.loss_mask.push_back(i > 0 ? 1 : 0);
    }
  }
  return s;
}

// Best fit, longest first: record 2 (5 tokens) opens a sequence, record 4 (4) another, record 1 (3) fills the
// first (room 3 is the least that holds it), records 5 (2) and 3 (1) join the second. The rest of a sequence
// is padding, a record of its own, and one more token closes the stream.
TEST(DataPack, BestFitDecreasingKeepsRecordsWholeAndPads) {
  const TokenStream in = records_of({3, 5, 1, 4, 2});
  PackStats stats;
  const TokenStream out = pack_records(in, 0, 5, 8, 0, "r.jsonl", stats);
  const std::vector<int32_t> tokens = {2, 2, 2, 2, 2, 1, 1, 1, 4, 4, 4, 4, 5, 5, 3, 0, 0};
  EXPECT_EQ(out.tokens, tokens);
  EXPECT_EQ(out.record_starts, (std::vector<int64_t>{0, 5, 8, 12, 14, 15, 16}));
  EXPECT_EQ(out.loss_mask[5], 0);  // each record's first token stays uncounted
  EXPECT_EQ(out.loss_mask[15], 0);
  EXPECT_EQ(stats.sequences, 2);
  EXPECT_EQ(stats.padding(), 1);
  EXPECT_EQ(stats.unpacked_padding(), 5 * 8 - 15);
  test::expect_data_error([&] { pack_records(in, 0, 5, 4, 0, "r.jsonl", stats); },
                          "r.jsonl line 2: a record of 5 tokens, more than --seq-length 4");
}

// prepare --pack marks each record's start in the mask; the loader restarts positions there and refuses
// another sequence length.
TEST(DataPack, PreparedShardsGiveTheLoaderEachRecordsPositions) {
  test::TempDir dir;
  std::string lines;
  for (int i = 0; i < 12; ++i)
    lines += "{\"prompt\": \"p\", \"completion\": \"" + std::string(1 + i % 4, 'c') + "\"}\n";
  test::write_text(dir.file("r.jsonl"), lines);
  auto bytes = make_byte_tokenizer();
  PrepareConfig cfg{
      .jsonl = dir.file("r.jsonl"), .out_dir = dir.file("out"), .val_fraction = 0, .pack_seq_len = 8};
  const PrepareResult r = prepare_shards(cfg, *bytes);
  EXPECT_EQ(r.pack.records, 12);
  EXPECT_EQ(r.train_tokens % 8, 1);  // whole sequences and the last one's last target
  const std::string shard = dir.file("out/data_train_000000.bin");
  std::vector<uint16_t> window(2 * 8 + 1);
  LoaderConfig lc{.seq_len = 8, .shuffle = false, .vocab_size = 256, .loss_mask = true, .packed = true};
  Loader loader({shard}, lc, window.data());
  std::vector<int32_t> in(16), tgt(16), pos(16);
  std::vector<uint8_t> mask(16);
  loader.read(
      0, 2, {.inputs = in.data(), .targets = tgt.data(), .loss_mask = mask.data(), .positions = pos.data()});
  for (int64_t i = 0; i < 16; ++i) {
    SCOPED_TRACE(i);
    // A record here is "p", its completion and byte 0; padding (zeros too) starts right after a record's 0.
    const bool pad_start = i % 8 >= 2 && in[i] == 0 && in[i - 1] == 0 && in[i - 2] != 0;
    const bool starts = i % 8 == 0 || in[i] == 'p' || pad_start;
    EXPECT_EQ(pos[i] == 0, starts);
    if (i % 8 != 0) {
      EXPECT_EQ(pos[i], starts ? 0 : pos[i - 1] + 1);
    }
    EXPECT_EQ(mask[i], uint8_t{tgt[i] == 'c' || (tgt[i] == 0 && in[i] == 'c')});
  }
  // Shards of two sequences each hold the same stream: whole sequences, each shard ending on its next one's
  // first token.
  const auto read_tokens = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    f.seekg(kShardHeaderInts * 4);
    std::vector<uint16_t> t(static_cast<size_t>(open_shard(path).num_tokens));
    f.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(t.size() * 2));
    return t;
  };
  const std::vector<uint16_t> whole = read_tokens(shard);
  cfg.out_dir = dir.file("small"), cfg.shard_tokens = 20;
  std::vector<uint16_t> joined;
  prepare_shards(cfg, *bytes);
  const std::vector<std::string> parts = find_shards(cfg.out_dir, "train");
  EXPECT_GT(parts.size(), 1u);
  for (const std::string& path : parts) {
    const std::vector<uint16_t> part = read_tokens(path);
    // 20 rounded down to whole sequences (the last shard may hold one), and one more token.
    EXPECT_TRUE(part.size() == 17u || (path == parts.back() && part.size() == 9u))
        << path << " " << part.size();
    if (!joined.empty()) {
      EXPECT_EQ(joined.back(), part.front());
      joined.pop_back();
    }
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, whole);
  lc.seq_len = 4;
  test::expect_data_error([&] { Loader({shard}, lc, window.data()); },
                          "records packed for sequences of 8 tokens");
  lc.packed = false;
  test::expect_data_error([&] { Loader({shard}, lc, window.data()); }, "not packed");
}

}  // namespace
}  // namespace mt
