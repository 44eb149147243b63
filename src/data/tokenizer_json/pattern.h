// What a Split, Replace or decoder's Replace matches: {"String": s} (the text itself) or {"Regex": r}, an
// Oniguruma regex (Hugging Face's tokenizers compiles with Oniguruma) run by PCRE2 with Unicode properties.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenizer_json/node.h"

namespace mt::tokjson {

using Span = std::pair<size_t, size_t>;  // [begin, end) in bytes

class Regex {
 public:
  // `pattern` in PCRE2's syntax; `where` names it in a compile error.
  Regex(const std::string& pattern, const Node& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Every non-overlapping match, left to right; an empty match moves on by one character. `text` is valid
  // UTF-8.
  std::vector<Span> matches(std::string_view text) const;

 private:
  std::string pattern_;
  void* code_;  // pcre2_code_8
};

// An Oniguruma pattern as PCRE2 reads it the way the reference implementation (@huggingface/tokenizers,
// JavaScript) rewrites it: \s is \p{White_Space}, \d is \p{Nd}, (?i:...) folds ASCII letters only. Escapes,
// anchors and groups outside that subset are refused by name.
std::string oniguruma_to_pcre2(const std::string& pattern, const Node& where);

class Pattern {
 public:
  explicit Pattern(const Node& pattern);  // the {"String": ...} or {"Regex": ...} object
  std::vector<Span> matches(std::string_view text) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace mt::tokjson
