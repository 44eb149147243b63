// The tokenizer.json engine's pieces on tiny crafted files: what the four real files
// (tests/cli/test_tokenize.py) do not exercise, and the rules each piece follows.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer_json/json_tokenizer.h"
#include "data/tokenizer_json/pattern.h"
#include "data/tokenizer_json/pre_tokenizer.h"
#include "data/utf8.h"
#include "data_test_util.h"

namespace mt {
namespace {

using nlohmann::json;

const std::string kR = "\xEF\xBF\xBD";  // U+FFFD

// WHATWG's decoder: one U+FFFD per maximal part of an ill-formed sequence, the breaking byte read again.
TEST(DataTokenizerJson, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(to_valid_utf8("ok \xC3\xA9 \xF0\x9F\x98\x80"), "ok \xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(to_valid_utf8("\xF0\x9F\x98 x"), kR + " x");                  // a cut 4-byte sequence is one
  EXPECT_EQ(to_valid_utf8("\xE0\x80\x80"), kR + kR + kR);                 // overlong: nothing is a prefix
  EXPECT_EQ(to_valid_utf8("\xF4\x90\x80\x80"), kR + kR + kR + kR);        // past U+10FFFF
  EXPECT_EQ(to_valid_utf8("\xE4\xB8\xE4\xB8\xAD"), kR + "\xE4\xB8\xAD");  // the breaking byte starts anew
  EXPECT_EQ(to_valid_utf8("\xFF\x80"), kR + kR);
}

std::vector<std::string> pre_tokenize(const json& config, const std::string& text, bool starts_text = true) {
  std::vector<std::string> pieces;
  tokjson::parse_pre_tokenizer(tokjson::Node(config, "t.json", "pre_tokenizer"))
      ->split(text, starts_text, &pieces);
  return pieces;
}

json split(const std::string& behavior, bool invert = false, json pattern = {{"String", "-"}}) {
  return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}

// Hugging Face's SplitDelimiterBehavior on "a-b--c-".
TEST(DataTokenizerJson, SplitBehaviors) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize(split("Isolated"), "a-b--c-"), (V{"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(pre_tokenize(split("Removed"), "a-b--c-"), (V{"a", "b", "c"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithPrevious"), "a-b--c-"), (V{"a-", "b-", "-", "c-"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithNext"), "a-b--c-"), (V{"a", "-b", "-", "-c", "-"}));
  EXPECT_EQ(pre_tokenize(split("Isolated", true, {{"Regex", "\\p{L}+"}}), "ab-c d"), (V{"ab", "c", "d"}));
  EXPECT_EQ(pre_tokenize(split("Isolated", false, {{"Regex", "\\s+"}}), "a \u3000b"),
            (V{"a", " \u3000", "b"}));
}

std::string rewrite(const std::string& pattern) {
  const json none;
  return tokjson::oniguruma_to_pcre2(pattern, tokjson::Node(none, "t.json", "pattern"));
}

// As the reference rewrites Oniguruma for JavaScript; what it cannot map is refused by name.
// Metaspace as Hugging Face's library runs it: spaces become the replacement, which a piece gets in front
// as prepend_scheme says (first: only a piece that starts the text), and with split each one starts a piece.
TEST(DataTokenizerJson, Metaspace) {
  const std::string m = "\u2581";
  const json always = {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}};
  EXPECT_EQ(pre_tokenize(always, "a b  c"), (std::vector<std::string>{m + "a", m + "b", m, m + "c"}));
  EXPECT_EQ(pre_tokenize(always, " a", false), (std::vector<std::string>{m + "a"}));  // starts with one
  json first = always;
  first["prepend_scheme"] = "first";
  EXPECT_EQ(pre_tokenize(first, "a b", true), (std::vector<std::string>{m + "a", m + "b"}));
  EXPECT_EQ(pre_tokenize(first, "a b", false), (std::vector<std::string>{"a", m + "b"}));
  json whole = always;
  whole["split"] = false;
  EXPECT_EQ(pre_tokenize(whole, "a b"), (std::vector<std::string>{m + "a" + m + "b"}));
  // Older files: add_prefix_space true is "always"; false means "never" to one reference and "always" to the
  // other, so it is refused by name, as a replacement of more than one character is.
  EXPECT_EQ(pre_tokenize({{"type", "Metaspace"}, {"add_prefix_space", true}}, "a"),
            (std::vector<std::string>{m + "a"}));
  for (const json& refused : {json{{"type", "Metaspace"}, {"add_prefix_space", false}},
                              json{{"type", "Metaspace"}, {"replacement", "__"}}}) {
    try {
      pre_tokenize(refused, "a");
      ADD_FAILURE() << refused.dump();
    } catch (const Error& e) {
      EXPECT_NE(
          std::string(e.what()).find(refused.contains("replacement") ? "pre_tokenizer.replacement"
                                                                     : "pre_tokenizer.add_prefix_space"),
          std::string::npos)
          << e.what();
    }
  }
}

TEST(DataTokenizerJson, OnigurumaRewrite) {
  EXPECT_EQ(rewrite("(?i:'s|'t)"), "(?:'[sS]|'[tT])");
  EXPECT_EQ(rewrite("\\s+(?!\\S)"), "\\p{White_Space}+(?!\\P{White_Space})");
  EXPECT_EQ(rewrite("[^\\s\\p{L}\\d]?"), "[^\\p{White_Space}\\p{L}\\p{Nd}]?");
  EXPECT_EQ(rewrite("\\uFF21\\x41\\p{N}{1,3}."), "\\x{FF21}\\x{41}\\p{N}{1,3}[^\\n]");
  EXPECT_EQ(rewrite("a+?b*c"), "a+?b*c");
  EXPECT_EQ(rewrite("\\p{N}{,3}x{2}"), "\\p{N}{0,3}x{2}");
  test::expect_data_error([] { rewrite("\\bword"); }, "the escape \\b at offset 0 is not supported");
  test::expect_data_error([] { rewrite("^a"); }, "the anchor ^");
  test::expect_data_error([] { rewrite("a++"); }, "a possessive quantifier");
  test::expect_data_error([] { rewrite("(?<name>a)"); }, "the group (?<n");
  test::expect_data_error([] { rewrite("[a"); }, "an unclosed [");
  test::expect_data_error([] { rewrite("[a[b]]"); }, "a nested class");
  test::expect_data_error([] { rewrite("[a-z&&[^b]]"); }, "intersection");
}

// A tokenizer over "a", "b", "c" and what `merges` make, with `model` changing the BPE model.
std::unique_ptr<Tokenizer> tiny(const json& vocab, const json& merges, const json& model = json::object(),
                                const json& top = json::object()) {
  json t = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  t["model"].update(model);
  t.update(top);
  return tokjson::make_json_tokenizer(t, "t.json", {});
}

// The best-ranked pair first, the leftmost among equals, one merge at a time.
TEST(DataTokenizerJson, BpeMergeOrder) {
  const json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}};
  auto t = tiny(vocab, {"b c", "a b", "a bc", "a a"});
  EXPECT_EQ(t->encode("abc"), (std::vector<int32_t>{5}));     // b c before a b
  EXPECT_EQ(t->encode("aaa"), (std::vector<int32_t>{6, 0}));  // the left pair
  EXPECT_EQ(t->encode("abab"), (std::vector<int32_t>{3, 3}));
  // Both merge forms.
  EXPECT_EQ(tiny(vocab, json::array({json::array({"a", "b"})}))->encode("abc"), (std::vector<int32_t>{3, 2}));
  // ignore_merges: a piece the vocabulary has is one token, merges or not.
  EXPECT_EQ(tiny(vocab, json::array())->encode("abc"), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(tiny(vocab, json::array(), {{"ignore_merges", true}})->encode("abc"), (std::vector<int32_t>{5}));
  EXPECT_EQ(t->vocab_size(), 7);
  // Ids are dense: a vocabulary of n tokens has ids 0..n-1, so its size is bounded by the file's.
  test::expect_data_error(
      [] {
        tiny({{"a", 0}, {"b", 5}}, json::array());
      },
      "t.json: model.vocab: token \"b\" has id 5, expected an id in [0, 2)");
  test::expect_data_error([] { tiny({{"a", 0}, {"b", 1}}, {"a c"}); }, "uses or makes a token missing");
}

// A character the vocabulary lacks: its bytes' <0xNN> tokens, else the unknown token (runs fused with
// fuse_unk), else nothing.
TEST(DataTokenizerJson, UnknownCharacters) {
  const json vocab = {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xE2\x82\xAC";  // a, é, €, €
  EXPECT_EQ(tiny(vocab, json::array(), {{"byte_fallback", true}, {"unk_token", "<unk>"}})->encode(text),
            (std::vector<int32_t>{1, 2, 3, 0, 0}));
  EXPECT_EQ(tiny(vocab, json::array(), {{"unk_token", "<unk>"}, {"fuse_unk", true}})->encode(text),
            (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(tiny(vocab, json::array())->encode(text), (std::vector<int32_t>{1}));
  auto fallback = tiny(
      vocab, json::array(), {{"byte_fallback", true}},
      {{"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}}});
  EXPECT_EQ(fallback->decode({1, 2, 3, 2}), "a\xC3\xA9" + kR);  // a cut sequence decodes as U+FFFD
}

// Added tokens: the longest at the leftmost place, before anything else; BOS/EOS only when asked for.
TEST(DataTokenizerJson, AddedTokensAndTemplate) {
  const json added = json::array({{{"id", 3}, {"content", "<s>"}, {"special", true}},
                                  {{"id", 4}, {"content", "<s><s>"}, {"special", true}},
                                  {{"id", 5}, {"content", "</s>"}, {"special", true}}});
  const json post = {{"type", "TemplateProcessing"},
                     {"single",
                      {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                       {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                       {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                     {"special_tokens",
                      {{"<s>", {{"id", "<s>"}, {"ids", {3}}, {"tokens", {"<s>"}}}},
                       {"</s>", {{"id", "</s>"}, {"ids", {5}}, {"tokens", {"</s>"}}}}}}};
  auto t = tiny({{"a", 0}, {"b", 1}, {"<", 2}}, json::array(), json::object(),
                {{"added_tokens", added}, {"post_processor", post}});
  EXPECT_EQ(t->encode("a<s><s><s>b<"), (std::vector<int32_t>{0, 4, 3, 1, 2}));
  EXPECT_EQ(t->encode_with_special_tokens("ab"), (std::vector<int32_t>{3, 0, 1, 5}));
  EXPECT_EQ(t->vocab_size(), 6);
  test::expect_data_error([&] { t->decode({6}); }, "token 6 is not in its vocabulary");
}

}  // namespace
}  // namespace mt
