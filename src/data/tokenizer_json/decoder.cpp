// Decoders, as the reference runs them; byte sequences that are not UTF-8 come out as U+FFFD, as the
// reference's TextDecoder makes them.
#include "data/tokenizer_json/decoder.h"

#include "data/tokenizer_json/pattern.h"
#include "data/tokenizer_json/pre_tokenizer.h"
#include "data/utf8.h"

namespace mt::tokjson {

namespace {

using Tokens = std::vector<std::string>;

class ByteLevelDecoder : public Decoder {
 public:
  explicit ByteLevelDecoder(std::function<bool(const std::string&)> is_added)
      : is_added_(std::move(is_added)) {
    for (int b = 0; b < 256; ++b) byte_of_[byte_level_char(static_cast<uint8_t>(b))] = static_cast<char>(b);
  }
  Tokens decode_chain(Tokens tokens) const override {
    Tokens out;
    std::string bytes;
    const auto flush = [&] {
      if (!bytes.empty()) out.push_back(to_valid_utf8(bytes)), bytes.clear();
    };
    for (const std::string& token : tokens) {
      if (is_added_(token)) {
        flush();
        out.push_back(token);
        continue;
      }
      for (size_t i = 0; i < token.size();) {
        int32_t cp;
        const size_t len = next_utf8(token, i, &cp);
        const auto it = byte_of_.find(token.substr(i, len));
        if (it != byte_of_.end()) bytes.push_back(it->second);  // no byte-level vocabulary spells others
        i += len;
      }
    }
    flush();
    return out;
  }

 private:
  std::function<bool(const std::string&)> is_added_;
  std::unordered_map<std::string, char> byte_of_;
};

class Replace : public Decoder {
 public:
  explicit Replace(const Node& n) : pattern_(n.at("pattern")), content_(n.string_or("content", "")) {}
  Tokens decode_chain(Tokens tokens) const override {
    for (std::string& token : tokens) {
      std::string out;
      size_t at = 0;
      for (const Span& m : pattern_.matches(token))
        out.append(token, at, m.first - at).append(content_), at = m.second;
      token = out.append(token, at);
    }
    return tokens;
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Metaspace's replacement back to spaces; the first token's leading space goes (the one the pre-tokenizer put
// in front). With prepend_scheme "never" the two references differ (Hugging Face's library keeps it, the
// reference drops it): refused.
class MetaspaceDecoder : public Decoder {
 public:
  explicit MetaspaceDecoder(const Node& n) : replacement_(metaspace_settings(n).replacement) {
    if (metaspace_settings(n).prepend == MetaspaceSettings::Prepend::never) n.unsupported("prepend_scheme");
  }
  Tokens decode_chain(Tokens tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string spaced;
      size_t at = 0;
      for (size_t found; (found = tokens[i].find(replacement_, at)) != std::string::npos;
           at = found + replacement_.size())
        spaced.append(tokens[i], at, found - at).push_back(' ');
      spaced.append(tokens[i], at);
      if (i == 0 && spaced.starts_with(' ')) spaced.erase(0, 1);
      tokens[i] = std::move(spaced);
    }
    return tokens;
  }

 private:
  std::string replacement_;
};

// Runs of <0xNN> tokens become the text their bytes spell.
class ByteFallback : public Decoder {
  // The byte a "<0xNN>" token stands for (two hex digits), else -1.
  static int fallback_byte(const std::string& token) {
    const auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
    const int high = digit(token[3]), low = digit(token[4]);
    return high < 0 || low < 0 ? -1 : high * 16 + low;
  }

 public:
  Tokens decode_chain(Tokens tokens) const override {
    Tokens out;
    std::string bytes;
    for (const std::string& token : tokens) {
      if (const int byte = fallback_byte(token); byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
        continue;
      }
      if (!bytes.empty()) out.push_back(to_valid_utf8(bytes)), bytes.clear();
      out.push_back(token);
    }
    if (!bytes.empty()) out.push_back(to_valid_utf8(bytes));
    return out;
  }
};

class Fuse : public Decoder {
 public:
  Tokens decode_chain(Tokens tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    return {all};
  }
};

// Cuts up to `start` leading and `stop` trailing copies of one character from each token.
class Strip : public Decoder {
 public:
  explicit Strip(const Node& n)
      : content_(n.string("content")), start_(n.integer_or("start", 0)), stop_(n.integer_or("stop", 0)) {
    if (content_.size() != 1) n.unsupported("content");  // the reference compares one UTF-16 unit
  }
  Tokens decode_chain(Tokens tokens) const override {
    for (std::string& token : tokens) {
      size_t begin = 0, end = token.size();
      for (int64_t k = 0; k < start_ && begin < end && token[begin] == content_[0]; ++k) ++begin;
      for (int64_t k = 0; k < stop_ && end > begin && token[end - 1] == content_[0]; ++k) --end;
      token = token.substr(begin, end - begin);
    }
    return tokens;
  }

 private:
  std::string content_;
  int64_t start_, stop_;
};

class SequenceDecoder : public Decoder {
 public:
  SequenceDecoder(const Node& n, const std::function<bool(const std::string&)>& is_added) {
    const Node list = n.at("decoders");
    if (!list.json().is_array()) list.fail("expected a list");
    for (size_t k = 0; k < list.size(); ++k) steps_.push_back(parse_decoder(list.at(k), is_added));
  }
  Tokens decode_chain(Tokens tokens) const override {
    for (const auto& step : steps_) {
      if (step) tokens = step->decode_chain(std::move(tokens));
    }
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const Node& n, std::function<bool(const std::string&)> is_added) {
  if (n.json().is_null()) return nullptr;
  const std::string type = n.string("type");
  if (type == "ByteLevel") {
    n.only({"type", "add_prefix_space", "trim_offsets", "use_regex"});
    return std::make_unique<ByteLevelDecoder>(std::move(is_added));
  }
  if (type == "Replace") return n.only({"type", "pattern", "content"}), std::make_unique<Replace>(n);
  if (type == "ByteFallback") return n.only({"type"}), std::make_unique<ByteFallback>();
  if (type == "Fuse") return n.only({"type"}), std::make_unique<Fuse>();
  if (type == "Strip") return n.only({"type", "content", "start", "stop"}), std::make_unique<Strip>(n);
  if (type == "Metaspace") {
    n.only({"type", "replacement", "prepend_scheme", "split", "add_prefix_space"});
    return std::make_unique<MetaspaceDecoder>(n);
  }
  if (type == "Sequence") return n.only({"type", "decoders"}), std::make_unique<SequenceDecoder>(n, is_added);
  n.unsupported("type");
}

}  // namespace mt::tokjson
