// The lexer of lexer.h: text and tags in one pass, each tag's body cut into expression tokens.
#include "data/jinja/lexer.h"

#include <cctype>
#include <string_view>

namespace mt::jinja {
namespace {

bool space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Jinja reads \r\n and \r as \n, and drops one newline that ends the source.
std::string normalize_newlines(const std::string& source) {
  std::string out;
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int hex_value(char c) {
  return std::isdigit(static_cast<unsigned char>(c))
             ? c - '0'
             : (std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the last tag's end took the newline before this text
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      const int text_line = line_;
      advance_to(tag);
      if (tag == src_.size()) {
        emit_text(text, text_line);
        break;
      }
      const char kind = src_[tag + 1];
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && space(text.back())) text.pop_back();
      } else if (kind != '{' && modifier != '+') {
        lstrip_block(text, line_starting);
      }
      emit_text(text, text_line);
      advance_to(tag + 2 + (modifier == '-' || modifier == '+' ? 1 : 0));
      line_starting = kind == '#' ? comment() : tag_body(kind);
    }
    tokens_.push_back({TokenKind::end, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  void advance_to(size_t to) {
    for (; pos_ < to; ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }

  // lstrip_blocks: a block tag alone at the start of its line takes the spaces and tabs before it.
  static void lstrip_block(std::string& text, bool line_starting) {
    const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (line_start == 0 && !line_starting) return;
    for (size_t i = line_start; i < text.size(); ++i)
      if (text[i] != ' ' && text[i] != '\t') return;
    text.resize(line_start);
  }

  void emit_text(const std::string& text, int line) {
    if (!text.empty()) tokens_.push_back({TokenKind::text, text, line});
  }

  // After a tag's end: `-` strips all whitespace after it, trim_blocks one newline after a block or comment.
  // Returns whether what it took ends with a newline, for lstrip_blocks' "at a line's start".
  bool after_tag_end(bool strip, bool block) {
    const size_t start = pos_;
    if (strip) {
      size_t to = pos_;
      while (to < src_.size() && space(src_[to])) ++to;
      advance_to(to);
    } else if (block && pos_ < src_.size() && src_[pos_] == '\n') {
      advance_to(pos_ + 1);
    }
    return pos_ > start && src_[pos_ - 1] == '\n';
  }

  bool comment() {
    const int line = line_;
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) throw TemplateError(line, "a comment {# is never closed with #}");
    const bool strip = close > pos_ && src_[close - 1] == '-';
    advance_to(close + 2);
    return after_tag_end(strip, true);
  }

  bool tag_body(char kind) {
    const char closer = kind == '{' ? '}' : '%';
    const int open_line = line_;
    tokens_.push_back({kind == '{' ? TokenKind::var_begin : TokenKind::block_begin, "", line_});
    int depth = 0;  // brackets: a `}` inside a dict literal does not end a {{ }}
    while (true) {
      while (pos_ < src_.size() && space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size())
        throw TemplateError(
            open_line, std::string("a tag opened with {") + (kind == '{' ? '{' : '%') + " is never closed");
      const std::string end{closer, '}'};
      const bool dash = src_[pos_] == '-' && src_.compare(pos_ + 1, 2, end) == 0;
      if (depth == 0 && (dash || src_.compare(pos_, 2, end) == 0)) {
        tokens_.push_back({kind == '{' ? TokenKind::var_end : TokenKind::block_end, "", line_});
        advance_to(pos_ + (dash ? 3 : 2));
        return after_tag_end(dash, kind == '%');
      }
      const Token t = next_token();
      if (t.kind == TokenKind::op && (t.text == "(" || t.text == "[" || t.text == "{")) ++depth;
      if (t.kind == TokenKind::op && (t.text == ")" || t.text == "]" || t.text == "}")) --depth;
      tokens_.push_back(t);
    }
  }

  Token next_token() {
    const int line = line_;
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos_;
      while (end < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
      Token t{TokenKind::name, src_.substr(pos_, end - pos_), line};
      advance_to(end);
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return number(line);
    if (c == '\'' || c == '"') return string_literal(line);
    for (const std::string_view op : {"==", "!=", "<=", ">=", "//", "**"}) {
      if (src_.compare(pos_, 2, op) == 0) {
        advance_to(pos_ + 2);
        return {TokenKind::op, std::string(op), line};
      }
    }
    if (std::string_view("+-*/%~<>=.,:|()[]{}").find(c) != std::string_view::npos) {
      advance_to(pos_ + 1);
      return {TokenKind::op, std::string(1, c), line};
    }
    throw TemplateError(line, std::string("unexpected character '") + c + "' in a tag");
  }

  Token number(int line) {
    size_t end = pos_;
    bool floating = false;
    while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
      ++end;
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      floating = true;
      for (++end; end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]));) ++end;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {  // 1e20, 2.5e-3
      size_t exp = end + 1;
      if (exp < src_.size() && (src_[exp] == '+' || src_[exp] == '-')) ++exp;
      if (exp < src_.size() && std::isdigit(static_cast<unsigned char>(src_[exp]))) {
        floating = true;
        for (end = exp; end < src_.size() && std::isdigit(static_cast<unsigned char>(src_[end]));) ++end;
      }
    }
    std::string digits;
    for (size_t i = pos_; i < end; ++i)
      if (src_[i] != '_') digits += src_[i];
    advance_to(end);
    return {floating ? TokenKind::floating : TokenKind::integer, digits, line};
  }

  // Python's escapes in a quoted string: \n \t \r \\ \' \" \xNN \uNNNN; others stay as written.
  Token string_literal(int line) {
    const char quote = src_[pos_];
    std::string out;
    size_t i = pos_ + 1;
    for (; i < src_.size() && src_[i] != quote; ++i) {
      if (src_[i] != '\\' || i + 1 >= src_.size()) {
        out += src_[i];
        continue;
      }
      const char e = src_[++i];
      const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
      if (digits > 0 && i + digits < src_.size()) {
        uint32_t cp = 0;
        for (size_t k = 1; k <= digits; ++k) cp = cp * 16 + static_cast<uint32_t>(hex_value(src_[i + k]));
        append_utf8(out, cp);
        i += digits;
        continue;
      }
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
        case '\'':
        case '"':
          out += e;
          break;
        case '\n':
          break;
        default:
          out += '\\';
          out += e;
      }
    }
    if (i >= src_.size()) throw TemplateError(line, "a string literal is never closed");
    advance_to(i + 1);
    return {TokenKind::string, out, line};
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace mt::jinja
