// Normalizers of a tokenizer.json: NFC, Replace, Prepend and Sequence (what Llama-2, Gemma-3 and Qwen3 use).
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer_json/node.h"

namespace mt::tokjson {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;  // valid UTF-8 in and out
};

// The "normalizer" value; null is no normalizer (nullptr).
std::unique_ptr<Normalizer> parse_normalizer(const Node& normalizer);

}  // namespace mt::tokjson
