// UTF-8 decoding shared by the tokenizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mt {

// Decodes the sequence that starts at s[i] into *cp and returns its length in bytes. A malformed, overlong or
// truncated sequence (or a surrogate) decodes as its first byte alone with *cp = -1, so any byte string can
// be walked without failing.
inline size_t next_utf8(std::string_view s, size_t i, int32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  *cp = -1;
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len = 0;
  int32_t value = 0, min_value = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, value = b0 & 0x1F, min_value = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, value = b0 & 0x0F, min_value = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, value = b0 & 0x07, min_value = 0x10000;
  } else {
    return 1;
  }
  if (i + len > s.size()) return 1;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 1;
    value = (value << 6) | (byte(i + k) & 0x3F);
  }
  if (value < min_value || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 1;
  *cp = value;
  return len;
}

// The text with each ill-formed byte sequence replaced by U+FFFD, one for each maximal part of a sequence
// (WHATWG's UTF-8 decoder: what JavaScript's TextDecoder, and so the reference tokenizers, read).
std::string to_valid_utf8(std::string_view s);

}  // namespace mt
