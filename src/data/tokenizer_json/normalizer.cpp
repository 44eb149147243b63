// Normalizers: NFC through ICU, the text replacements, and their sequence.
#include "data/tokenizer_json/normalizer.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "data/tokenizer_json/pattern.h"

namespace mt::tokjson {

namespace {

// Unicode's composed form, by ICU (whose data the reference's JavaScript engine also uses).
class Nfc : public Normalizer {
 public:
  std::string normalize(std::string text) const override {
    // Text below U+0300 (the first combining mark; bytes below 0xCC) is already composed.
    if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0xCC; })) {
      return text;
    }
    UErrorCode status = U_ZERO_ERROR;
    const UNormalizer2* nfc = unorm2_getNFCInstance(&status);
    std::vector<UChar> wide(text.size() + 1), composed(3 * text.size() + 16);
    int32_t wide_length = 0;
    u_strFromUTF8(wide.data(), static_cast<int32_t>(wide.size()), &wide_length, text.data(),
                  static_cast<int32_t>(text.size()), &status);
    const int32_t composed_length = unorm2_normalize(nfc, wide.data(), wide_length, composed.data(),
                                                     static_cast<int32_t>(composed.size()), &status);
    std::string out(4 * static_cast<size_t>(composed_length) + 4, '\0');
    int32_t out_length = 0;
    u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &out_length, composed.data(), composed_length,
                &status);
    if (U_FAILURE(status)) fail_data(std::string("NFC normalization failed: ") + u_errorName(status));
    out.resize(out_length);
    return out;
  }
};

class ReplaceNormalizer : public Normalizer {
 public:
  explicit ReplaceNormalizer(const Node& n) : pattern_(n.at("pattern")), content_(n.string("content")) {}
  std::string normalize(std::string text) const override {
    std::string out;
    size_t at = 0;
    for (const Span& m : pattern_.matches(text))
      out.append(text, at, m.first - at).append(content_), at = m.second;
    return out.append(text, at);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(const Node& n) : prefix_(n.string("prepend")) {}
  std::string normalize(std::string text) const override { return prefix_ + text; }

 private:
  std::string prefix_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(const Node& n) {
    const Node list = n.at("normalizers");
    if (!list.json().is_array()) list.fail("expected a list");
    for (size_t k = 0; k < list.size(); ++k) steps_.push_back(parse_normalizer(list.at(k)));
  }
  std::string normalize(std::string text) const override {
    for (const auto& step : steps_) {
      if (step) text = step->normalize(std::move(text));
    }
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const Node& n) {
  if (n.json().is_null()) return nullptr;
  const std::string type = n.string("type");
  if (type == "NFC") return n.only({"type"}), std::make_unique<Nfc>();
  if (type == "Replace")
    return n.only({"type", "pattern", "content"}), std::make_unique<ReplaceNormalizer>(n);
  if (type == "Prepend") return n.only({"type", "prepend"}), std::make_unique<Prepend>(n);
  if (type == "Sequence") return n.only({"type", "normalizers"}), std::make_unique<SequenceNormalizer>(n);
  n.unsupported("type");
}

}  // namespace mt::tokjson
