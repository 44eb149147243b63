// Pre-tokenizers: Split, ByteLevel (GPT-2's regex and byte alphabet), Metaspace and Sequence.
#include "data/tokenizer_json/pre_tokenizer.h"

#include <array>

#include "data/tokenizer_json/pattern.h"
#include "data/utf8.h"

namespace mt::tokjson {

namespace {

// How Split keeps what its pattern matches (Hugging Face's SplitDelimiterBehavior).
enum class Behavior { isolated, removed, merged_with_previous, merged_with_next };

class Split : public PreTokenizer {
 public:
  explicit Split(const Node& n) : pattern_(n.at("pattern")), invert_(n.boolean_or("invert", false)) {
    const std::string behavior = n.string("behavior");
    if (behavior == "Isolated") {
      behavior_ = Behavior::isolated;
    } else if (behavior == "Removed") {
      behavior_ = Behavior::removed;
    } else if (behavior == "MergedWithPrevious") {
      behavior_ = Behavior::merged_with_previous;
    } else if (behavior == "MergedWithNext") {
      behavior_ = Behavior::merged_with_next;
    } else {
      n.unsupported("behavior");
    }
    if (invert_ && behavior_ != Behavior::isolated) n.unsupported("behavior");
  }

  void split(std::string_view piece, bool, std::vector<std::string>* out) const override {
    const std::vector<Span> matches = pattern_.matches(piece);
    if (invert_) {  // the reference keeps the matches alone
      for (const Span& m : matches) {
        if (m.second > m.first) out->emplace_back(piece.substr(m.first, m.second - m.first));
      }
      return;
    }
    // The text between matches and the matches, in order, each marked; empty ones never count.
    std::vector<std::pair<std::string_view, bool>> elements;
    size_t at = 0;
    for (const Span& m : matches) {
      elements.emplace_back(piece.substr(at, m.first - at), false);
      elements.emplace_back(piece.substr(m.first, m.second - m.first), true);
      at = m.second;
    }
    elements.emplace_back(piece.substr(at), false);
    std::vector<std::string> parts;
    bool last_was = false, have_last = false;  // whether the last part began as a match
    for (const auto& [text, is_match] : elements) {
      if (text.empty() || (is_match && behavior_ == Behavior::removed)) continue;
      // A match joins the text before it (MergedWithPrevious); text joins the match before it
      // (MergedWithNext); a part that was already joined takes nothing more.
      const bool join = have_last && last_was != is_match &&
                        ((behavior_ == Behavior::merged_with_previous && is_match) ||
                         (behavior_ == Behavior::merged_with_next && !is_match));
      if (join) {
        parts.back().append(text);
        have_last = false;
      } else {
        parts.emplace_back(text);
        last_was = is_match, have_last = true;
      }
    }
    for (std::string& p : parts) out->push_back(std::move(p));
  }

 private:
  Pattern pattern_;
  bool invert_;
  Behavior behavior_ = Behavior::isolated;
};

// GPT-2's pre-tokenizer regex as the reference writes it (a JavaScript literal with the `u` flag), where \s
// is JavaScript's: Zs, the ASCII controls \t\n\v\f\r, U+2028, U+2029 and U+FEFF (not U+0085).
#define MT_JS_SPACE "\\t\\n\\x0B\\f\\r\\p{Zs}\\x{2028}\\x{2029}\\x{FEFF}"
constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" MT_JS_SPACE "\\p{L}\\p{N}]+|[" MT_JS_SPACE
    "]+(?![^" MT_JS_SPACE "])|[" MT_JS_SPACE "]+";
#undef MT_JS_SPACE

class ByteLevel : public PreTokenizer {
 public:
  explicit ByteLevel(const Node& n)
      : add_prefix_space_(n.boolean_or("add_prefix_space", false)),
        regex_(n.boolean_or("use_regex", true) ? std::make_unique<Regex>(kGpt2Regex, n) : nullptr) {}

  void split(std::string_view piece, bool, std::vector<std::string>* out) const override {
    std::string text = add_prefix_space_ && (piece.empty() || piece[0] != ' ') ? " " : "";
    text.append(piece);
    if (!regex_) return out->push_back(spelled(text));
    for (const Span& m : regex_->matches(text))
      out->push_back(spelled(std::string_view(text).substr(m.first, m.second - m.first)));
  }

 private:
  static std::string spelled(std::string_view bytes) {
    std::string s;
    for (char c : bytes) s += byte_level_char(static_cast<uint8_t>(c));
    return s;
  }

  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

// SentencePiece's spaces: each ' ' becomes the replacement ("▁"), which a piece gets in front too as its
// prepend scheme says (unless it starts with one); with `split` (the default), each replacement starts a new
// piece (Hugging Face's split, MergedWithNext), so "▁a▁b" is "▁a", "▁b".
class Metaspace : public PreTokenizer {
 public:
  explicit Metaspace(const Node& n) : settings_(metaspace_settings(n)), split_(n.boolean_or("split", true)) {}

  void split(std::string_view piece, bool first, std::vector<std::string>* out) const override {
    const std::string& mark = settings_.replacement;
    std::string text;
    for (char c : piece) {
      if (c == ' ')
        text.append(mark);
      else
        text.push_back(c);
    }
    using Prepend = MetaspaceSettings::Prepend;
    const bool prepend =
        settings_.prepend == Prepend::always || (settings_.prepend == Prepend::first && first);
    if (prepend && !text.starts_with(mark)) text.insert(0, mark);
    if (text.empty()) return;
    if (!split_) return out->push_back(std::move(text));
    size_t start = 0;
    for (size_t at = text.find(mark, 1); at != std::string::npos; at = text.find(mark, at + mark.size()))
      out->push_back(text.substr(start, at - start)), start = at;
    out->push_back(text.substr(start));
  }

 private:
  MetaspaceSettings settings_;
  bool split_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(const Node& n) {
    const Node list = n.at("pretokenizers");
    if (!list.json().is_array()) list.fail("expected a list");
    for (size_t k = 0; k < list.size(); ++k) steps_.push_back(parse_pre_tokenizer(list.at(k)));
  }

  // A later step's `first` piece is the first of the earlier steps' (Hugging Face's offset 0).
  void split(std::string_view piece, bool first, std::vector<std::string>* out) const override {
    std::vector<std::string> pieces{std::string(piece)}, next;
    for (const auto& step : steps_) {
      if (!step) continue;
      next.clear();
      for (size_t k = 0; k < pieces.size(); ++k) step->split(pieces[k], first && k == 0, &next);
      pieces.swap(next);
    }
    for (std::string& p : pieces) out->push_back(std::move(p));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

MetaspaceSettings metaspace_settings(const Node& n) {
  MetaspaceSettings s;
  s.replacement = n.string_or("replacement", "\u2581");
  int32_t cp;
  if (s.replacement.empty() || next_utf8(s.replacement, 0, &cp) != s.replacement.size())
    n.unsupported("replacement");  // one character
  using Prepend = MetaspaceSettings::Prepend;
  if (n.has("prepend_scheme")) {
    const std::string scheme = n.string("prepend_scheme");
    if (scheme == "always") {
      s.prepend = Prepend::always;
    } else if (scheme == "first") {
      s.prepend = Prepend::first;
    } else if (scheme == "never") {
      s.prepend = Prepend::never;
    } else {
      n.unsupported("prepend_scheme");
    }
  } else if (!n.boolean_or("add_prefix_space", true)) {
    // Older files: Hugging Face's library reads it as "never", the reference ignores it ("always").
    n.unsupported("add_prefix_space");
  }
  return s;
}

const std::string& byte_level_char(uint8_t b) {
  // The bytes '!'..'~', '¡'..'¬' and '®'..'ÿ' stand for themselves; the other 68 are U+0100, U+0101, ... in
  // byte order.
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> t;
    int n = 0;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
      const int cp = printable ? byte : 0x100 + n++;
      t[byte] = cp < 0x80
                    ? std::string(1, static_cast<char>(cp))
                    : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    return t;
  }();
  return chars[b];
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Node& n) {
  if (n.json().is_null()) return nullptr;
  const std::string type = n.string("type");
  if (type == "Split") return n.only({"type", "pattern", "behavior", "invert"}), std::make_unique<Split>(n);
  if (type == "ByteLevel") {
    // trim_offsets moves offsets only, which memtrain does not report.
    n.only({"type", "add_prefix_space", "trim_offsets", "use_regex"});
    return std::make_unique<ByteLevel>(n);
  }
  if (type == "Metaspace") {
    n.only({"type", "replacement", "prepend_scheme", "split", "add_prefix_space"});
    return std::make_unique<Metaspace>(n);
  }
  if (type == "Sequence") return n.only({"type", "pretokenizers"}), std::make_unique<Sequence>(n);
  n.unsupported("type");
}

}  // namespace mt::tokjson
