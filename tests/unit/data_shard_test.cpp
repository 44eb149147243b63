#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "data/shard.h"
#include "data_test_util.h"

namespace mt {
namespace {

std::vector<int32_t> read_header(const std::string& path) {
  std::vector<int32_t> header(kShardHeaderInts);
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(header.data()), header.size() * 4);
  return header;
}

void patch_int(const std::string& path, int64_t index, int32_t value) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(index * 4);
  f.write(reinterpret_cast<const char*>(&value), 4);
}

TEST(DataShard, WriteThenOpenRoundTrips) {
  test::TempDir dir;
  const std::string path = dir.file("x_train_000000.bin");
  const std::vector<int32_t> tokens = {1, 2, 65535, 0, 42};
  write_shard(path, tokens);
  const std::vector<int32_t> header = read_header(path);
  EXPECT_EQ(header[0], kShardMagic);
  EXPECT_EQ(header[1], kShardVersion16);
  EXPECT_EQ(header[2], 5);
  EXPECT_EQ(header[3], 0);  // no tokenizer recorded
  const ShardInfo info = open_shard(path);
  EXPECT_EQ(info.path, path);
  EXPECT_EQ(info.num_tokens, 5);
  EXPECT_EQ(info.token_bytes, 2);
  EXPECT_FALSE(info.made_by.recorded());
  std::vector<int32_t> body(5);
  std::ifstream in(path, std::ios::binary);
  in.seekg(kShardHeaderInts * 4);
  for (int32_t& t : body) {
    uint16_t id = 0;
    in.read(reinterpret_cast<char*>(&id), 2);
    t = id;
  }
  EXPECT_EQ(body, tokens);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(DataShard, BadMagicVersionAndSizeNameTheFile) {
  test::TempDir dir;
  const std::string path = dir.file("x_train_000000.bin");
  write_shard(path, {1, 2, 3});
  patch_int(path, 0, 123);
  test::expect_data_error([&] { open_shard(path); }, path + ": bad magic 123 (expected 20240520)");
  patch_int(path, 0, kShardMagic);
  patch_int(path, 1, 7);
  test::expect_data_error([&] { open_shard(path); }, path + ": bad version 7");
  patch_int(path, 1, kShardVersion16);
  ASSERT_EQ(::truncate(path.c_str(), kShardHeaderInts * 4 + 4), 0);
  test::expect_data_error([&] { open_shard(path); }, path + ": truncated");
  test::expect_data_error([&] { open_shard(path); }, "expected 1030 bytes, file has 1028");
  ASSERT_EQ(::truncate(path.c_str(), 100), 0);
  test::expect_data_error([&] { open_shard(path); }, path);
  test::expect_data_error([&] { open_shard(dir.file("missing.bin")); }, dir.file("missing.bin"));
}

// A tokenizer of more than 65,536 ids writes version 2, uint32 tokens; every shard records the tokenizer's
// vocabulary and fingerprint.
TEST(DataShard, ThirtyTwoBitShardsAndTheTokenizerRoundTrip) {
  test::TempDir dir;
  const std::string wide = dir.file("w_train_000000.bin"), narrow = dir.file("n_train_000000.bin");
  const ShardTokenizer qwen{.vocab_size = 151'669, .fingerprint = 0x9e3779b9u};
  const std::vector<int32_t> tokens = {151'668, 0, 65'536, 70'000, 3};
  write_shard(wide, tokens, qwen);
  const std::vector<int32_t> header = read_header(wide);
  EXPECT_EQ(header[1], kShardVersion32);
  EXPECT_EQ(header[3], 151'669);
  EXPECT_EQ(static_cast<uint32_t>(header[4]), 0x9e3779b9u);
  EXPECT_EQ(std::filesystem::file_size(wide), kShardHeaderInts * 4 + 5 * 4);
  const ShardInfo info = open_shard(wide);
  EXPECT_EQ(info.num_tokens, 5);
  EXPECT_EQ(info.token_bytes, 4);
  EXPECT_EQ(info.made_by, qwen);
  std::vector<int32_t> body(5);
  std::ifstream in(wide, std::ios::binary);
  in.seekg(kShardHeaderInts * 4);
  in.read(reinterpret_cast<char*>(body.data()), 20);
  EXPECT_EQ(body, tokens);

  const ShardTokenizer gpt2{.vocab_size = 50'257, .fingerprint = 0x12345678u};
  write_shard(narrow, {50'256, 1}, gpt2);
  EXPECT_EQ(read_header(narrow)[1], kShardVersion16);
  EXPECT_EQ(open_shard(narrow).made_by, gpt2);
  EXPECT_EQ(open_shard(narrow).token_bytes, 2);
  // An id that does not fit the tokenizer's width is a program error, never a wrapped id.
  EXPECT_THROW(write_shard(narrow, {65'536}, gpt2), std::logic_error);
  EXPECT_THROW(write_shard(wide, {-1}, qwen), std::logic_error);
  // The size is checked against the version's width.
  patch_int(narrow, 1, kShardVersion32);
  test::expect_data_error([&] { open_shard(narrow); },
                          narrow + ": truncated: header says 2 tokens of 4 bytes");
  patch_int(wide, 1, kShardVersion16);
  test::expect_data_error([&] { open_shard(wide); }, wide + ": oversized: header says 5 tokens of 2 bytes");
}

TEST(DataShard, FindShardsInDirectoryAndGlob) {
  test::TempDir dir;
  for (const char* name : {"a_train_000001.bin", "a_train_000000.bin", "a_val_000000.bin", "notes.txt"}) {
    test::write_text(dir.file(name), "");
  }
  EXPECT_EQ(find_shards(dir.path(), "train"),
            (std::vector<std::string>{dir.file("a_train_000000.bin"), dir.file("a_train_000001.bin")}));
  EXPECT_EQ(find_shards(dir.path(), "val"), (std::vector<std::string>{dir.file("a_val_000000.bin")}));
  EXPECT_EQ(find_shards(dir.file("*_000001.bin"), "train"),
            (std::vector<std::string>{dir.file("a_train_000001.bin")}));
  test::TempDir empty;
  test::expect_data_error([&] { find_shards(empty.path(), "train"); }, "no train shards in " + empty.path());
  test::expect_data_error([&] { find_shards(empty.file("*.bin"), "val"); }, empty.file("*.bin"));
}

}  // namespace
}  // namespace mt
