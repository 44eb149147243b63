#include <gtest/gtest.h>

#include <fstream>

#include "data/instruction.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data_test_util.h"

namespace mt {
namespace {

std::vector<uint8_t> read_mask(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(kShardHeaderInts * 4);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Bytes make the template visible: each character is one token, the record's end is byte 0.
TEST(DataInstruction, KeysAndTemplate) {
  test::TempDir dir;
  test::write_text(dir.file("r.jsonl"), R"({"q": "Q?", "a": "A."})"
                                        "\n\n"
                                        R"({"q": "", "a": "yz"})"
                                        "\n");
  auto bytes = make_byte_tokenizer();
  const TokenStream s =
      read_instruction_records(dir.file("r.jsonl"), {.prompt = "q", .completion = "a"}, *bytes);
  const std::vector<int32_t> tokens = {'Q', '?', 'A', '.', 0, 'y', 'z', 0};
  EXPECT_EQ(s.tokens, tokens);
  // An empty prompt: the completion's first token starts the record and is not counted.
  EXPECT_EQ(s.loss_mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 0, 1, 1}));
  EXPECT_EQ(s.record_starts, (std::vector<int64_t>{0, 5}));
}

TEST(DataInstruction, ChatCountsTheAssistantTurns) {
  test::TempDir dir;
  test::write_text(
      dir.file("c.jsonl"),
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},)"
      R"( {"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]})"
      "\n");
  auto bytes = make_byte_tokenizer();
  const TokenStream s = read_instruction_records(dir.file("c.jsonl"), {}, *bytes);
  const std::string text = "<|user|>\nhi\n<|assistant|>\nyo\n<|user|>\n?\n<|assistant|>\n!\n";
  std::vector<int32_t> tokens(text.begin(), text.end());
  tokens.push_back(0);
  EXPECT_EQ(s.tokens, tokens);
  std::vector<uint8_t> mask(tokens.size(), 0);
  for (const std::string counted : {"yo\n", "!\n"})
    for (size_t at = text.find("|>\n" + counted) + 3, i = 0; i < counted.size(); ++i) mask[at + i] = 1;
  mask.back() = 1;
  EXPECT_EQ(s.loss_mask, mask);
}

// A model's template: the text encoded in segments, read / counted / read ..., the counted ones the assistant
// turns with their end of turn, and no end token after the record.
TEST(DataInstruction, ModelTemplateCountsTheAssistantTurnsInSegments) {
  class Recording : public Tokenizer {
   public:
    std::vector<int32_t> encode(std::string_view text) const override {
      segments.emplace_back(text);
      return bytes_->encode(text);
    }
    std::string decode(const std::vector<int32_t>& t) const override { return bytes_->decode(t); }
    int32_t vocab_size() const override { return 256; }
    int32_t end_of_text() const override { return -1; }
    std::string name() const override { return "recording"; }
    uint32_t fingerprint() const override { return 0; }
    mutable std::vector<std::string> segments;

   private:
    std::unique_ptr<Tokenizer> bytes_ = make_byte_tokenizer();
  } tokenizer;
  test::TempDir dir;
  test::write_text(dir.file("t.jinja"),
                   "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}\n"
                   "{% if add_generation_prompt %}<assistant>{% endif %}");
  test::write_text(
      dir.file("c.jsonl"),
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},)"
      R"( {"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]})"
      "\n");
  const ChatTemplate chat = load_chat_template(dir.file("t.jinja"));
  int64_t uncounted = 0;
  const TokenStream s = read_instruction_records(dir.file("c.jsonl"), {}, tokenizer, &chat, &uncounted);
  EXPECT_EQ(tokenizer.segments, (std::vector<std::string>{"<user>hi</s><assistant>", "yo</s>",
                                                          "<user>?</s><assistant>", "!</s>", ""}));
  const std::string text = "<user>hi</s><assistant>yo</s><user>?</s><assistant>!</s>";
  EXPECT_EQ(s.tokens, std::vector<int32_t>(text.begin(), text.end()));
  std::vector<uint8_t> mask(text.size(), 0);
  for (const std::string counted : {"yo</s>", "!</s>"})
    std::fill_n(mask.begin() + static_cast<int64_t>(text.find(counted)), counted.size(), 1);
  EXPECT_EQ(s.loss_mask, mask);
  EXPECT_EQ(uncounted, 0);
}

TEST(DataInstruction, GptTwoClosesRecordsWithEndOfText) {
  // A stand-in with GPT-2's end-of-text id; the byte tokenizer's encode otherwise.
  class WithEnd : public Tokenizer {
   public:
    std::vector<int32_t> encode(std::string_view text) const override { return bytes_->encode(text); }
    std::string decode(const std::vector<int32_t>& t) const override { return bytes_->decode(t); }
    int32_t vocab_size() const override { return 50257; }
    int32_t end_of_text() const override { return 50256; }
    std::string name() const override { return "with-end"; }
    uint32_t fingerprint() const override { return 0; }

   private:
    std::unique_ptr<Tokenizer> bytes_ = make_byte_tokenizer();
  } tokenizer;
  test::TempDir dir;
  test::write_text(dir.file("r.jsonl"), "{\"prompt\": \"a\\u0000\", \"completion\": \"b\"}\n");
  const TokenStream s = read_instruction_records(dir.file("r.jsonl"), {}, tokenizer);
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{'a', 0, 'b', 50256}));
}

TEST(DataInstruction, BadRecordsNameTheFileAndLine) {
  test::TempDir dir;
  auto bytes = make_byte_tokenizer();
  const std::string good = R"({"prompt": "p", "completion": "c"})";
  const auto expect_error = [&](const std::string& line, const std::string& what) {
    test::write_text(dir.file("bad.jsonl"), good + "\n\n" + line + "\n");
    test::expect_data_error([&] { read_instruction_records(dir.file("bad.jsonl"), {}, *bytes); },
                            dir.file("bad.jsonl") + " line 3: " + what);
  };
  expect_error(R"({"prompt": "p", "completion": )", "invalid JSON");
  expect_error(R"({"prompt": "p"})", "missing key \"completion\"");
  expect_error(R"({"prompt": 3, "completion": "c"})", "\"prompt\" is number, expected a string");
  expect_error(R"({"prompt": "p", "completion": ""})", "empty completion");
  expect_error(R"([1, 2])", "record is a list, expected a JSON object");
  expect_error(R"({"messages": []})", "\"messages\" is a list, expected a non-empty list");
  expect_error(R"({"messages": [{"role": "user", "content": "x"}]})",
               "message 0: the last message is the user's");
  expect_error(R"({"messages": [{"role": "bot", "content": "x"}]})", "message 0: role \"bot\"");
  expect_error(R"({"messages": [{"role": "assistant"}]})", "message 0: missing key \"content\"");
  expect_error(R"({"messages": [{"role": "assistant", "content": ""}]})", "message 0: empty completion");
  expect_error(R"({"prompt": "p\u0000", "completion": "c"})", "text holds byte 0");
  test::write_text(dir.file("none.jsonl"), "\n  \n");
  test::expect_data_error([&] { read_instruction_records(dir.file("none.jsonl"), {}, *bytes); },
                          dir.file("none.jsonl") + ": no records");
}

// Whole records go to validation; each shard has its mask beside it, and a bad record writes nothing.
TEST(DataInstruction, PrepareWritesMasksBesideTheShardsAndSplitsOnRecords) {
  test::TempDir dir;
  std::string lines;
  for (int i = 0; i < 10; ++i)
    lines += R"({"prompt": "prompt", "completion": "answer"})"
             "\n";
  test::write_text(dir.file("r.jsonl"), lines);
  auto bytes = make_byte_tokenizer();
  PrepareConfig cfg{.jsonl = dir.file("r.jsonl"),
                    .out_dir = dir.file("out"),
                    .name = "sft",
                    .val_fraction = 0.25,
                    .shard_tokens = 1000,
                    .min_val_tokens = 0};
  const PrepareResult r = prepare_shards(cfg, *bytes);
  // 13 tokens a record: 130 in all; a quarter is 32.5 -> 33, raised to the 3 records that hold the cut (39).
  EXPECT_EQ(r.val_tokens, 39);
  EXPECT_EQ(r.train_tokens, 91);
  EXPECT_EQ(r.records, 10);
  EXPECT_EQ(r.counted_tokens, 70);
  const std::string train = dir.file("out/sft_train_000000.bin");
  EXPECT_EQ(loss_mask_path(train), dir.file("out/sft_train_000000.mask"));
  EXPECT_EQ(find_shards(cfg.out_dir, "train"), std::vector<std::string>{train});
  const std::vector<uint8_t> mask = read_mask(loss_mask_path(train));
  ASSERT_EQ(mask.size(), 91u);
  EXPECT_EQ(std::vector<uint8_t>(mask.begin(), mask.begin() + 13),
            (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_TRUE(shards_have_loss_masks(find_shards(cfg.out_dir, "val")));

  cfg.overwrite = true;
  test::write_text(dir.file("r.jsonl"), lines + "{\n");
  test::expect_data_error([&] { prepare_shards(cfg, *bytes); }, " line 11: invalid JSON");
  EXPECT_EQ(read_mask(loss_mask_path(train)), mask);

  // Text prepared over the same name removes the masks, which no longer match.
  test::write_text(dir.file("t.txt"), std::string(200, 't'));
  cfg = {.inputs = {dir.file("t.txt")},
         .out_dir = dir.file("out"),
         .name = "sft",
         .min_val_tokens = 0,
         .overwrite = true};
  prepare_shards(cfg, *bytes);
  EXPECT_FALSE(shards_have_loss_masks(find_shards(cfg.out_dir, "train")));
}

// The loader hands out the mask of each target: token i + 1's.
TEST(DataInstruction, LoaderReadsTheTargetsMask) {
  test::TempDir dir;
  const std::string shard = dir.file("m_train_000000.bin");
  std::vector<int32_t> tokens(9);
  for (int i = 0; i < 9; ++i) tokens[i] = i;
  write_shard(shard, tokens);
  write_loss_mask(loss_mask_path(shard), {1, 0, 1, 1, 0, 0, 1, 0, 1});
  std::vector<uint16_t> window(5);
  Loader loader({shard}, {.seq_len = 4, .shuffle = false, .vocab_size = 16, .loss_mask = true},
                window.data());
  std::vector<int32_t> in(8), tgt(8);
  std::vector<uint8_t> mask(8);
  EXPECT_EQ(loader.read(0, 2, {.inputs = in.data(), .targets = tgt.data(), .loss_mask = mask.data()}), 4);
  EXPECT_EQ(tgt, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 1, 1, 0, 0, 1, 0, 1}));
  EXPECT_EQ(loader.count_targets(0, 2), 4);
  EXPECT_EQ(loader.count_targets(1, 1), 2);

  test::expect_data_error([&] { Loader({shard}, {.seq_len = 4, .vocab_size = 16}, window.data()); },
                          shard + ": has a loss mask");
  write_shard(shard, std::vector<int32_t>(tokens.begin(), tokens.end() - 1));
  test::expect_data_error(
      [&] { Loader({shard}, {.seq_len = 4, .vocab_size = 16, .loss_mask = true}, window.data()); },
      "loss mask of 9 tokens, but its shard has 8");
}

}  // namespace
}  // namespace mt
