// GPT-2's byte-pair encoding. Text is split by gpt2_pretokenize; each piece starts as one token per byte, and
// the adjacent pair that vocab.bpe ranks first is merged (every occurrence, left to right) until no ranked
// pair is left. Pieces repeat a lot in real text, so their encodings are cached.
#include <array>
#include <climits>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/crc32c.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "data/utf8.h"

namespace mt {
namespace {

// encoder.json and vocab.bpe spell each byte as a printable character: the bytes '!'..'~', '¡'..'¬' and
// '®'..'ÿ' stand for themselves and the other 68 bytes for U+0100, U+0101, ... in byte order. This maps such
// a character back to its byte (-1 for any other character).
int byte_of_char(int32_t cp) {
  static const std::array<int16_t, 0x100 + 68> table = [] {
    std::array<int16_t, 0x100 + 68> t;
    t.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[printable ? b : 0x100 + n++] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return (cp >= 0 && cp < static_cast<int32_t>(table.size())) ? table[cp] : -1;
}

// The raw bytes a token string from encoder.json or vocab.bpe stands for.
std::string token_bytes(const std::string& spelled, const std::string& file) {
  std::string bytes;
  for (size_t i = 0; i < spelled.size();) {
    int32_t cp;
    i += next_utf8(spelled, i, &cp);
    const int b = byte_of_char(cp);
    if (b < 0) fail_data(file + ": token \"" + spelled + "\" has a character outside GPT-2's byte alphabet");
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_data(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail_data(path + ": read failed");
  return text.str();
}

class Gpt2Tokenizer : public Tokenizer {
 public:
  Gpt2Tokenizer(const std::string& encoder_json, const std::string& vocab_bpe) {
    const std::unordered_map<std::string, int32_t> ids = load_encoder(encoder_json);
    for (int b = 0; b < 256; ++b) {
      const auto it = ids.find(std::string(1, static_cast<char>(b)));
      if (it == ids.end()) fail_data(encoder_json + ": no token for byte " + std::to_string(b));
      byte_token_[b] = it->second;
    }
    const auto eot = ids.find("<|endoftext|>");
    if (eot == ids.end()) fail_data(encoder_json + ": no <|endoftext|> token");
    end_of_text_ = eot->second;
    load_merges(vocab_bpe, ids);
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> tokens;
    for (std::string_view piece : gpt2_pretokenize(text)) {
      const std::vector<int32_t> piece_tokens = encode_piece(piece);
      tokens.insert(tokens.end(), piece_tokens.begin(), piece_tokens.end());
    }
    return tokens;
  }

  std::string decode(const std::vector<int32_t>& tokens) const override {
    std::string text;
    for (int32_t t : tokens) {
      if (t < 0 || t >= vocab_size()) {
        fail_data("gpt2 tokenizer: token " + std::to_string(t) + " is outside [0, " +
                  std::to_string(vocab_size()) + ")");
      }
      text += bytes_[t];
    }
    return text;
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(bytes_.size()); }
  int32_t end_of_text() const override { return end_of_text_; }
  std::string name() const override { return "gpt2"; }
  uint32_t fingerprint() const override { return fingerprint_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t token;
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | uint32_t(b); }
  static constexpr size_t kCacheEntries = 1 << 16;  // cleared when full, so memory stays bounded

  // encoder.json maps each token's spelling to its id; the ids must be exactly 0..n-1.
  std::unordered_map<std::string, int32_t> load_encoder(const std::string& path) {
    nlohmann::json json;
    try {
      const std::string text = read_file(path);
      fingerprint_ = crc32c(text.data(), text.size(), fingerprint_);
      json = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail_data(path + ": not valid JSON (" + e.what() + ")");
    }
    if (!json.is_object() || json.empty()) fail_data(path + ": expected an object of token -> id");
    std::unordered_map<std::string, int32_t> ids;
    bytes_.resize(json.size());
    std::vector<bool> seen(json.size(), false);
    for (const auto& [spelled, id] : json.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= int64_t(json.size()) ||
          seen[id.get<int64_t>()]) {
        fail_data(path + ": token \"" + spelled + "\" has id " + id.dump() +
                  ", expected a unique id in [0, " + std::to_string(json.size()) + ")");
      }
      const int32_t t = id.get<int32_t>();
      seen[t] = true;
      bytes_[t] = token_bytes(spelled, path);
      ids[bytes_[t]] = t;
    }
    return ids;
  }

  // vocab.bpe: a version line, then one merge "a b" per line, best first.
  void load_merges(const std::string& path, const std::unordered_map<std::string, int32_t>& ids) {
    const std::string text = read_file(path);
    fingerprint_ = crc32c(text.data(), text.size(), fingerprint_);
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
      const std::string a = token_bytes(line.substr(0, space), path),
                        b = token_bytes(line.substr(space + 1), path);
      const auto ia = ids.find(a), ib = ids.find(b), iab = ids.find(a + b);
      if (ia == ids.end() || ib == ids.end() || iab == ids.end()) {
        fail_data(path + " line " + std::to_string(line_no) + ": merge \"" + line +
                  "\" uses or makes a token missing from the encoder");
      }
      merges_.insert_or_assign(pair_key(ia->second, ib->second),
                               Merge{static_cast<int32_t>(merges_.size()), iab->second});
    }
  }

  std::vector<int32_t> encode_piece(std::string_view piece) const {
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      const auto it = cache_.find(std::string(piece));
      if (it != cache_.end()) return it->second;
    }
    std::vector<int32_t> word(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) word[i] = byte_token_[static_cast<uint8_t>(piece[i])];
    while (word.size() >= 2) {
      const Merge* best = nullptr;
      size_t best_at = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        const auto it = merges_.find(pair_key(word[i], word[i + 1]));
        if (it != merges_.end() && (!best || it->second.rank < best->rank)) best = &it->second, best_at = i;
      }
      if (!best) break;
      const int32_t a = word[best_at], b = word[best_at + 1];
      size_t out = 0;
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
          word[out++] = best->token, i += 2;
        } else {
          word[out++] = word[i++];
        }
      }
      word.resize(out);
    }
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(piece, word);
    return word;
  }

  std::vector<std::string> bytes_;  // token id -> the bytes it stands for
  std::array<int32_t, 256> byte_token_;
  int32_t end_of_text_ = -1;
  uint32_t fingerprint_ = 0;
  std::unordered_map<uint64_t, Merge> merges_;  // (left, right) -> rank and merged token
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& encoder_json,
                                               const std::string& vocab_bpe) {
  return std::make_unique<Gpt2Tokenizer>(encoder_json, vocab_bpe);
}

}  // namespace mt
