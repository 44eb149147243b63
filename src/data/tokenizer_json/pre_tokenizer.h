// Pre-tokenizers of a tokenizer.json: Split (a String or a regex), ByteLevel, Metaspace and Sequence. Each
// takes a piece of text and cuts it into the pieces the model encodes one by one.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer_json/node.h"

namespace mt::tokjson {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // `first`: the piece starts the text (no added token before it), which Metaspace's "first" asks.
  virtual void split(std::string_view piece, bool first, std::vector<std::string>* out) const = 0;
};

// Metaspace's settings, which its pre-tokenizer and decoder share: the character spaces become, and when a
// piece gets it in front (prepend_scheme; add_prefix_space in older files).
struct MetaspaceSettings {
  enum class Prepend { always, first, never };
  std::string replacement;
  Prepend prepend = Prepend::always;
};
MetaspaceSettings metaspace_settings(const Node& n);

// The "pre_tokenizer" value; null is none (nullptr).
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Node& pre_tokenizer);

// The character GPT-2's byte-level alphabet spells byte `b` with, as UTF-8 (vocabularies spell bytes so).
const std::string& byte_level_char(uint8_t b);

}  // namespace mt::tokjson
