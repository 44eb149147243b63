// Replacing what is not UTF-8, as WHATWG's decoder does.
#include "data/utf8.h"

namespace mt {

std::string to_valid_utf8(std::string_view s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      out.push_back(s[i++]);
      continue;
    }
    // How many continuation bytes the lead byte needs, and the range the first of them must be in (which
    // rules out overlong forms, surrogates and code points past U+10FFFF).
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    }
    size_t j = i + 1, seen = 0;
    while (seen < need && j < s.size() && static_cast<uint8_t>(s[j]) >= lo &&
           static_cast<uint8_t>(s[j]) <= hi) {
      ++j, ++seen, lo = 0x80, hi = 0xBF;
    }
    if (need > 0 && seen == need) {
      out.append(s.substr(i, j - i));
    } else {
      out.append(kReplacement);  // the byte that broke the sequence is read again as a new one
    }
    i = j;
  }
  return out;
}

}  // namespace mt
