// Python's str methods on UTF-8 text, by code point; case mapping changes ASCII letters only.
#include "data/jinja/string_ops.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cctype>
#include <string_view>

#include "data/jinja/builtins.h"
#include "data/utf8.h"

namespace mt::jinja {

bool py_space(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

namespace {

// str.isspace() of a code point, by Python's definition over ICU's character data: general category Zs, or
// bidirectional class WS, B or S (NBSP, the ideographic space, the separators, ...).
bool unicode_space(const std::string& code_point) {
  int32_t cp;
  next_utf8(code_point, 0, &cp);
  if (u_charType(cp) == U_SPACE_SEPARATOR) return true;
  const UCharDirection direction = u_charDirection(cp);
  return direction == U_WHITE_SPACE_NEUTRAL || direction == U_BLOCK_SEPARATOR ||
         direction == U_SEGMENT_SEPARATOR;
}

std::string joined(const std::vector<std::string>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) out += cps[i];
  return out;
}

}  // namespace

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<std::string> cps = code_points(s);
  const std::vector<std::string> set =
      chars.is_string() ? code_points(chars.str()) : std::vector<std::string>{};
  const auto strips = [&](const std::string& cp) {
    return chars.is_string() ? std::find(set.begin(), set.end(), cp) != set.end() : unicode_space(cp);
  };
  size_t begin = 0, end = cps.size();
  while (left && begin < end && strips(cps[begin])) ++begin;
  while (right && end > begin && strips(cps[end - 1])) --end;
  return joined(cps, begin, end);
}

std::string map_case(std::string s, int (*f)(int)) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

std::string capitalize(const std::string& s) {
  std::string out = map_case(s, [](int c) { return std::tolower(c); });
  if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80)
    out[0] = static_cast<char>(std::toupper(out[0]));
  return out;
}

std::string title(const std::string& s, bool jinja_words) {
  std::string out = s;
  bool word_start = true;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80) c = static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
    word_start = jinja_words ? py_space(u) || std::string_view("-({[<").find(c) != std::string_view::npos
                             : !std::isalpha(u) && u < 0x80;
  }
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t pos = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t hit = from.empty() ? (pos <= s.size() ? pos : std::string::npos) : s.find(from, pos);
    if (hit == std::string::npos) break;
    out += s.substr(pos, hit - pos) + to;
    if (from.empty()) {
      if (hit < s.size()) out += s[hit];
      pos = hit + 1;
    } else {
      pos = hit + from.size();
    }
  }
  return pos <= s.size() ? out + s.substr(pos) : out;
}

// str.split(sep=None, maxsplit=-1).
List split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (sep.undefined() || sep.none()) {  // runs of whitespace; the rest after maxsplit keeps its trailing ones
    const std::vector<std::string> cps = code_points(s);
    for (size_t i = 0;;) {
      while (i < cps.size() && unicode_space(cps[i])) ++i;
      if (i == cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(joined(cps, i, cps.size()));
        break;
      }
      size_t end = i;
      while (end < cps.size() && !unicode_space(cps[end])) ++end;
      out.push_back(joined(cps, i, end));
      i = end;
    }
    return out;
  }
  if (!sep.is_string()) throw ValueError("split's separator must be a string, not " + type_name(sep));
  const std::string& d = sep.str();
  if (d.empty()) throw ValueError("split: empty separator");
  size_t pos = 0;
  for (size_t hit; (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) &&
                   (hit = s.find(d, pos)) != std::string::npos;
       pos = hit + d.size())
    out.push_back(s.substr(pos, hit - pos));
  out.push_back(s.substr(pos));
  return out;
}

}  // namespace mt::jinja
