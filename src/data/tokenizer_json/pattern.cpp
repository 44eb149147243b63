// Patterns of a tokenizer.json: literal strings, and Oniguruma regexes run by PCRE2.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tokenizer_json/pattern.h"

#include <pcre2.h>

#include <cctype>
#include <cstring>

#include "core/error.h"

namespace mt::tokjson {

namespace {

pcre2_code* code(void* p) {
  return static_cast<pcre2_code*>(p);
}

// The escapes the rewrite maps; letters not listed (\w, \b, \A, \h, ...) are refused.
const char* rewritten_escape(char c) {
  switch (c) {
    case 's':
      return "\\p{White_Space}";
    case 'S':
      return "\\P{White_Space}";
    case 'd':
      return "\\p{Nd}";
    case 'D':
      return "\\P{Nd}";
    case 'n':
      return "\\n";
    case 'r':
      return "\\r";
    case 't':
      return "\\t";
    case 'f':
      return "\\f";
    case 'v':
      return "\\x0B";
    default:
      return nullptr;
  }
}

// The group openings the rewrite passes on as they are.
constexpr const char* kGroups[] = {"(?:", "(?=", "(?!", "(?<=", "(?<!"};

struct Rewriter {
  const std::string& in;
  const Node& where;
  std::string out;
  size_t i = 0;
  bool in_class = false;
  bool after_quantifier = false;  // a + right after one makes it possessive
  std::vector<bool> fold_stack{false};

  [[noreturn]] void refuse(const std::string& what) const {
    where.fail("pattern.Regex " + nlohmann::json(in).dump() + ": " + what + " at offset " +
               std::to_string(i) + " is not supported");
  }

  void escape() {
    after_quantifier = false;
    if (i + 1 >= in.size()) refuse("a trailing backslash");
    const char c = in[i + 1];
    if ((c == 'p' || c == 'P') && i + 2 < in.size() && in[i + 2] == '{') {
      const size_t close = in.find('}', i);
      if (close == std::string::npos) refuse("an unclosed \\p{");
      out.append(in, i, close + 1 - i), i = close + 1;
    } else if (c == 'x' || c == 'u') {
      // \xHH, \x{H...} and \uHHHH become PCRE2's \x{...}.
      size_t begin = i + 2, end = begin;
      if (c == 'x' && begin < in.size() && in[begin] == '{') {
        end = in.find('}', begin), ++begin;
        if (end == std::string::npos) refuse("an unclosed \\x{");
      } else {
        const size_t digits = c == 'x' ? 2 : 4;
        while (end < in.size() && end - begin < digits && std::isxdigit(static_cast<unsigned char>(in[end])))
          ++end;
        if (end - begin != digits) refuse(std::string("a short \\") + c + " escape");
      }
      out += "\\x{" + in.substr(begin, end - begin) + "}";
      i = end + (in[end] == '}' ? 1 : 0);
    } else if (const char* r = rewritten_escape(c)) {
      out += r, i += 2;
    } else if (std::isalnum(static_cast<unsigned char>(c))) {
      refuse(std::string("the escape \\") + c);
    } else {
      out += '\\', out += c, i += 2;
    }
  }

  void group() {
    if (in.compare(i, 4, "(?i:") == 0) {
      out += "(?:", i += 4, fold_stack.push_back(true);
      return;
    }
    if (in.compare(i, 2, "(?") == 0) {
      for (const char* g : kGroups) {
        if (in.compare(i, std::strlen(g), g) == 0) {
          out += g, i += std::strlen(g), fold_stack.push_back(fold_stack.back());
          return;
        }
      }
      refuse("the group " + in.substr(i, 4));
    }
    out += '(', ++i, fold_stack.push_back(fold_stack.back());
  }

  void plain(char c) {
    if (in_class || !std::strchr("+*?}", c)) after_quantifier = false;
    if (in_class) {
      if (c == ']') in_class = false;
      // Oniguruma nests classes, intersects them and names POSIX ones; PCRE2 reads them otherwise.
      if (c == '[' || in.compare(i, 2, "&&") == 0) refuse("a nested class, intersection or POSIX class");
      if (fold_stack.back() && std::isalpha(static_cast<unsigned char>(c)))
        refuse("a letter in a class under (?i:");
      out += c, ++i;
      return;
    }
    switch (c) {
      case '[':
        in_class = true, out += c, ++i;
        if (i < in.size() && in[i] == '^') out += '^', ++i;
        if (i < in.size() && in[i] == ']') out += "\\]", ++i;  // a leading ] is literal
        return;
      case '(':
        return group();
      case ')':
        if (fold_stack.size() == 1) refuse("an unmatched )");
        fold_stack.pop_back(), out += c, ++i;
        return;
      case '.':
        out += "[^\\n]", ++i;
        return;
      case '{':  // Oniguruma's {,n} is {0,n}; PCRE2 10.42 would read it as text
        out += in.compare(i, 2, "{,") == 0 ? "{0" : "{", ++i;
        return;
      case '^':
      case '$':
        refuse(std::string("the anchor ") + c);
      case '+':
      case '*':
      case '?':
      case '}':
        if (after_quantifier && c == '+') refuse("a possessive quantifier");
        after_quantifier = true, out += c, ++i;
        return;
      default:
        if (fold_stack.back() && std::isalpha(static_cast<unsigned char>(c))) {
          out += '[', out += static_cast<char>(std::tolower(c)), out += static_cast<char>(std::toupper(c)),
              out += ']';
        } else {
          out += c;
        }
        ++i;
    }
  }

  std::string run() {
    while (i < in.size()) {
      if (in[i] == '\\') {
        escape();
      } else {
        plain(in[i]);
      }
    }
    if (in_class) refuse("an unclosed [");
    if (fold_stack.size() != 1) refuse("an unclosed (");
    return out;
  }
};

}  // namespace

std::string oniguruma_to_pcre2(const std::string& pattern, const Node& where) {
  return Rewriter{pattern, where, {}}.run();
}

Regex::Regex(const std::string& pattern, const Node& where) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (!code_) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    where.fail("regex " + nlohmann::json(pattern).dump() + " does not compile at offset " +
               std::to_string(offset) + ": " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code(code_), PCRE2_JIT_COMPLETE);  // without JIT (not built for this CPU) it interprets
}

Regex::~Regex() {
  pcre2_code_free(code(code_));
}

std::vector<Span> Regex::matches(std::string_view text) const {
  std::vector<Span> spans;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code(code_), nullptr);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (size_t at = 0; at <= text.size();) {
    const int rc = pcre2_match(code(code_), subject, text.size(), at, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {  // a limit (JIT stack, backtracking): never a silently shorter list of matches
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      pcre2_match_data_free(data);
      fail_data("tokenizer regex " + nlohmann::json(pattern_).dump() + " on a piece of " +
                std::to_string(text.size()) + " bytes: " + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    spans.emplace_back(ovector[0], ovector[1]);
    at = ovector[1];
    if (ovector[0] == ovector[1]) {  // an empty match: on past the next character
      if (at == text.size()) break;
      ++at;
      while (at < text.size() && (static_cast<uint8_t>(text[at]) & 0xC0) == 0x80) ++at;
    }
  }
  pcre2_match_data_free(data);
  return spans;
}

Pattern::Pattern(const Node& pattern) {
  pattern.only({"String", "Regex"});
  if (pattern.has("String") == pattern.has("Regex")) pattern.fail("expected one of \"String\" or \"Regex\"");
  if (pattern.has("String")) {
    literal_ = pattern.string("String");
    if (literal_.empty()) pattern.fail("String is empty");
  } else {
    regex_ = std::make_unique<Regex>(oniguruma_to_pcre2(pattern.string("Regex"), pattern), pattern);
  }
}

std::vector<Span> Pattern::matches(std::string_view text) const {
  if (regex_) return regex_->matches(text);
  std::vector<Span> spans;
  for (size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at)) {
    spans.emplace_back(at, at + literal_.size());
    at += literal_.size();
  }
  return spans;
}

}  // namespace mt::tokjson
