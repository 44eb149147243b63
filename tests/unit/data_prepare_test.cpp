#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mt
