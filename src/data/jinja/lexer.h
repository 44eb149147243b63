// A chat template's source as tokens: the text between tags, and each tag's expression tokens between its
// begin and end, with Jinja's whitespace control applied as transformers configures it: `{%-`/`-%}` (and the
// same on `{{ }}` and `{# #}`) strip all whitespace on that side, trim_blocks drops the newline after a block
// or comment tag, lstrip_blocks the spaces and tabs before one on its line (unless `{%+`). Comments are
// dropped, one trailing newline of the source too (Jinja's keep_trailing_newline=False).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace mt::jinja {

// An error in a template, at a line of it (1-based).
struct TemplateError : std::runtime_error {
  TemplateError(int line, const std::string& what) : std::runtime_error(what), line(line) {}
  int line;
};

enum class TokenKind {
  text,
  var_begin,
  var_end,
  block_begin,
  block_end,
  name,
  string,
  integer,
  floating,
  op,
  end
};

struct Token {
  TokenKind kind;
  std::string text;  // text, names, operators; a string literal unescaped; a number's digits
  int line;
};

std::vector<Token> tokenize(const std::string& source);

}  // namespace mt::jinja
