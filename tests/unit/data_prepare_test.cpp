#include <gtest/gtest.h>

#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data_test_util.h"

namespace mt {
namespace {

TEST(DataPrepare, WritesTrainAndValShardsWithTheRightCounts) {
  test::TempDir dir;
  test::write_text(dir.file("a.txt"), std::string(600, 'a'));
  test::write_text(dir.file("b.txt"), std::string(400, 'b'));
  auto bytes = make_byte_tokenizer();
  PrepareConfig cfg{.inputs = {dir.file("a.txt"), dir.file("b.txt")},
                    .out_dir = dir.file("out/shards"),
                    .name = "t",
                    .val_fraction = 0.1,
                    .shard_tokens = 400,
                    .min_val_tokens = 0};
  const PrepareResult r = prepare_shards(cfg, *bytes);
  EXPECT_EQ(r.train_tokens, 900);  // bytes have no end-of-text token, so 1000 tokens in all
  EXPECT_EQ(r.val_tokens, 100);
  EXPECT_EQ(find_shards(cfg.out_dir, "train"),
            (std::vector<std::string>{dir.file("out/shards/t_train_000000.bin"),
                                      dir.file("out/shards/t_train_000001.bin"),
                                      dir.file("out/shards/t_train_000002.bin")}));
  EXPECT_EQ(open_shard(dir.file("out/shards/t_train_000002.bin")).num_tokens, 100);
  EXPECT_EQ(open_shard(dir.file("out/shards/t_val_000000.bin")).num_tokens, 100);
  EXPECT_EQ(r.files.size(), 4u);

  // A rerun into the same folder is refused unless told to replace its shards, which are kept meanwhile.
  cfg.inputs = {dir.file("b.txt")};
  test::expect_data_error([&] { prepare_shards(cfg, *bytes); }, "--overwrite-shards");
  EXPECT_EQ(find_shards(cfg.out_dir, "train").size(), 3u);
  // A smaller rerun leaves no stale shard behind; validation grows to one window when the stream allows.
  cfg.overwrite = true;
  cfg.shard_tokens = 1000;
  cfg.min_val_tokens = 150;
  const PrepareResult small = prepare_shards(cfg, *bytes);
  EXPECT_EQ(small.val_tokens, 150);
  EXPECT_EQ(find_shards(cfg.out_dir, "train").size(), 1u);
  EXPECT_EQ(open_shard(dir.file("out/shards/t_train_000000.bin")).num_tokens, 250);
}

TEST(DataPrepare, MissingInputIsADataError) {
  test::TempDir dir;
  auto bytes = make_byte_tokenizer();
  PrepareConfig cfg{.inputs = {dir.file("nope.txt")}, .out_dir = dir.path()};
  test::expect_data_error([&] { prepare_shards(cfg, *bytes); }, dir.file("nope.txt"));
}

// Shards of no tokens would only fail later, in train.
TEST(DataPrepare, EmptyInputIsADataErrorNamingIt) {
  test::TempDir dir;
  test::write_text(dir.file("text.txt"), "some text");
  test::write_text(dir.file("empty.txt"), "");
  auto bytes = make_byte_tokenizer();
  PrepareConfig cfg{.inputs = {dir.file("text.txt"), dir.file("empty.txt")}, .out_dir = dir.file("out")};
  test::expect_data_error([&] { prepare_shards(cfg, *bytes); }, dir.file("empty.txt") + ": empty");
}

// Bytes as ids past 16 bits, as a vocabulary of 70,000 has them: byte b is 65,536 + b, end of text 69,999.
class WideBytes : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (const char c : text) ids.push_back(65'536 + static_cast<unsigned char>(c));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (const int32_t id : ids) text += static_cast<char>(id - 65'536);
    return text;
  }
  int32_t vocab_size() const override { return 70'000; }
  int32_t end_of_text() const override { return 69'999; }
  std::string name() const override { return "wide-bytes"; }
  uint32_t fingerprint() const override { return 0xc0ffee42u; }
};

// A tokenizer of more than 65,536 ids writes 32-bit shards that record it; the loader reads its ids back.
TEST(DataPrepare, ATokenizerPastSixteenBitsWritesThirtyTwoBitShards) {
  test::TempDir dir;
  test::write_text(dir.file("a.txt"), "hello");
  test::write_text(dir.file("b.txt"), "world!");
  const WideBytes wide;
  const PrepareConfig cfg{.inputs = {dir.file("a.txt"), dir.file("b.txt")},
                          .out_dir = dir.file("out"),
                          .val_fraction = 0,
                          .min_val_tokens = 0};
  const PrepareResult r = prepare_shards(cfg, wide);
  EXPECT_EQ(r.made_by, (ShardTokenizer{70'000, 0xc0ffee42u}));
  const ShardInfo shard = open_shard(dir.file("out/data_train_000000.bin"));
  EXPECT_EQ(shard.token_bytes, 4);
  EXPECT_EQ(shard.made_by, r.made_by);
  std::vector<int32_t> stream = wide.encode("hello");
  stream.push_back(wide.end_of_text());
  for (const int32_t id : wide.encode("world!")) stream.push_back(id);
  ASSERT_EQ(shard.num_tokens, static_cast<int64_t>(stream.size()));
  const int64_t t = shard.num_tokens - 1;
  const LoaderConfig lc{.seq_len = t, .shuffle = false, .vocab_size = 70'000};
  std::vector<int32_t> window(Loader::window_tokens(lc)), in(t), tgt(t);
  Loader({shard.path}, lc, window.data()).read(0, 1, {.inputs = in.data(), .targets = tgt.data()});
  EXPECT_EQ(in, std::vector<int32_t>(stream.begin(), stream.end() - 1));
  EXPECT_EQ(tgt, std::vector<int32_t>(stream.begin() + 1, stream.end()));

  // Bytes stay 16-bit shards, recording the byte tokenizer (no file: fingerprint 0).
  auto bytes = make_byte_tokenizer();
  const PrepareConfig narrow{.inputs = {dir.file("a.txt")}, .out_dir = dir.file("bytes"), .val_fraction = 0};
  EXPECT_EQ(prepare_shards(narrow, *bytes).made_by, (ShardTokenizer{256, 0}));
  EXPECT_EQ(open_shard(dir.file("bytes/data_train_000000.bin")).token_bytes, 2);
}

}  // namespace
}  // namespace mt
