// GPT-2's pre-tokenizer, written out by hand because std::regex has neither \p{L} nor lookahead. It splits
// text exactly as the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// does with JavaScript's `u` flag (the reference encoder), given the character classes below.
#include <algorithm>
#include <iterator>

#include "data/tokenizer.h"
#include "data/utf8.h"

namespace mt {
namespace {

struct Range {
  int32_t lo, hi;  // inclusive
};

// \p{L} for the blocks memtrain classifies exactly: Latin-1 Supplement, Latin Extended-A/B, IPA, Spacing
// Modifier Letters, Greek and Coptic, Cyrillic (and Supplement), Armenian, Hebrew, Arabic (and Supplement),
// Devanagari, Thai, Hangul Jamo, Latin Extended Additional, Greek Extended, superscripts/subscripts,
// letterlike and number forms, CJK Symbols, Hiragana, Katakana, Hangul Compatibility Jamo, CJK Unified
// Ideographs (and Extension A, and B onwards in plane 2), Hangul Syllables, CJK Compatibility Ideographs,
// Halfwidth and Fullwidth Forms. Combining marks inside these blocks (Arabic harakat, Devanagari and Thai
// vowel signs, kana voicing marks) are not letters, as in Unicode. Letters of other scripts classify as
// "other".
constexpr Range kLetters[] = {
    {0xAA, 0xAA},       {0xB5, 0xB5},       {0xBA, 0xBA},       {0xC0, 0xD6},       {0xD8, 0xF6},
    {0xF8, 0x2C1},      {0x2C6, 0x2D1},     {0x2E0, 0x2E4},     {0x2EC, 0x2EC},     {0x2EE, 0x2EE},
    {0x370, 0x374},     {0x376, 0x377},     {0x37A, 0x37D},     {0x37F, 0x37F},     {0x386, 0x386},
    {0x388, 0x38A},     {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},
    {0x48A, 0x52F},     {0x531, 0x556},     {0x559, 0x559},     {0x560, 0x588},     {0x5D0, 0x5EA},
    {0x5EF, 0x5F2},     {0x620, 0x64A},     {0x66E, 0x66F},     {0x671, 0x6D3},     {0x6D5, 0x6D5},
    {0x6E5, 0x6E6},     {0x6EE, 0x6EF},     {0x6FA, 0x6FC},     {0x6FF, 0x6FF},     {0x750, 0x77F},
    {0x904, 0x939},     {0x93D, 0x93D},     {0x950, 0x950},     {0x958, 0x961},     {0x971, 0x97F},
    {0xE01, 0xE30},     {0xE32, 0xE33},     {0xE40, 0xE46},     {0x1100, 0x11FF},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2071, 0x2071},   {0x207F, 0x207F},
    {0x2090, 0x209C},   {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},   {0x212A, 0x212D},
    {0x212F, 0x2139},   {0x213C, 0x213F},   {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},
    {0x3005, 0x3006},   {0x3031, 0x3035},   {0x303B, 0x303C},   {0x3041, 0x3096},   {0x309D, 0x309F},
    {0x30A1, 0x30FA},   {0x30FC, 0x30FF},   {0x3131, 0x318E},   {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},
    {0xAC00, 0xD7A3},   {0xF900, 0xFA6D},   {0xFA70, 0xFAD9},   {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},
    {0xFF66, 0xFFBE},   {0xFFC2, 0xFFC7},   {0xFFCA, 0xFFCF},   {0xFFD2, 0xFFD7},   {0xFFDA, 0xFFDC},
    {0x20000, 0x2A6DF}, {0x2A700, 0x2B81D}, {0x2B820, 0x2CEAD}, {0x2CEB0, 0x2EBE0}, {0x2EBF0, 0x2EE5D},
    {0x2F800, 0x2FA1D},
};

// \p{N} outside ASCII: every number in the blocks above (Latin-1 superscripts and fractions, Arabic-Indic,
// Devanagari and Thai digits, super/subscript digits, Roman numerals, circled numbers, CJK numerals,
// fullwidth digits, digits with a full stop or comma), plus the decimal digits of every other script
// (kDigitRuns).
constexpr Range kNumbers[] = {
    {0xB2, 0xB3},     {0xB9, 0xB9},     {0xBC, 0xBE},     {0x2070, 0x2070},   {0x2074, 0x2079},
    {0x2080, 0x2089}, {0x2150, 0x2182}, {0x2185, 0x2189}, {0x2460, 0x249B},   {0x24EA, 0x24FF},
    {0x3007, 0x3007}, {0x3021, 0x3029}, {0x3038, 0x303A}, {0x1D7CE, 0x1D7FF}, {0x1F100, 0x1F10C},
};

// First code point of each run of ten decimal digits (\p{Nd}) outside ASCII.
constexpr int32_t kDigitRuns[] = {
    0x660,   0x6F0,   0x7C0,   0x966,   0x9E6,   0xA66,   0xAE6,   0xB66,   0xBE6,   0xC66,   0xCE6,
    0xD66,   0xDE6,   0xE50,   0xED0,   0xF20,   0x1040,  0x1090,  0x17E0,  0x1810,  0x1946,  0x19D0,
    0x1A80,  0x1A90,  0x1B50,  0x1BB0,  0x1C40,  0x1C50,  0xA620,  0xA8D0,  0xA900,  0xA9D0,  0xA9F0,
    0xAA50,  0xABF0,  0xFF10,  0x104A0, 0x10D30, 0x10D40, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0,
    0x11450, 0x114D0, 0x11650, 0x116C0, 0x116D0, 0x116DA, 0x11730, 0x118E0, 0x11950, 0x11BF0, 0x11C50,
    0x11D50, 0x11DA0, 0x11DE0, 0x11F50, 0x16130, 0x16A60, 0x16AC0, 0x16B50, 0x16D70, 0x1CCF0, 0x1E140,
    0x1E2F0, 0x1E4F0, 0x1E5F1, 0x1E950, 0x1FBF0,
};

// JavaScript's \s outside ASCII.
constexpr Range kSpaces[] = {
    {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
    {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF},
};

template <size_t N>
bool in_ranges(const Range (&ranges)[N], int32_t cp) {
  const Range* r = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                    [](int32_t c, const Range& range) { return c < range.lo; });
  return r != std::begin(ranges) && cp <= std::prev(r)->hi;
}

bool in_digit_run(int32_t cp) {
  const int32_t* r = std::upper_bound(std::begin(kDigitRuns), std::end(kDigitRuns), cp);
  return r != std::begin(kDigitRuns) && cp < *std::prev(r) + 10;
}

enum class CharClass { letter, number, space, other };

struct Char {
  CharClass cls;
  size_t len;  // bytes
};

CharClass classify(int32_t cp) {
  if (cp < 0) return CharClass::other;  // a byte that is not valid UTF-8
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::letter;
    if (cp >= '0' && cp <= '9') return CharClass::number;
    if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return CharClass::space;
    return CharClass::other;
  }
  if (in_ranges(kLetters, cp)) return CharClass::letter;
  if (in_ranges(kNumbers, cp) || in_digit_run(cp)) return CharClass::number;
  if (in_ranges(kSpaces, cp)) return CharClass::space;
  return CharClass::other;
}

Char char_at(std::string_view text, size_t i) {
  int32_t cp;
  const size_t len = next_utf8(text, i, &cp);
  return {classify(cp), len};
}

// Length of the contraction ('s 't 're 've 'm 'll 'd) that starts at text[i], or 0.
size_t contraction_length(std::string_view text, size_t i) {
  for (std::string_view c : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"}) {
    if (text.substr(i, c.size()) == c) return c.size();
  }
  return 0;
}

// End of the regex match that starts at text[i].
size_t match_end(std::string_view text, size_t i) {
  if (text[i] == '\'') {
    if (size_t len = contraction_length(text, i)) return i + len;
  }
  Char head = char_at(text, i);
  size_t j = i;
  // " ?X+": one leading ' ' joins a run of letters, numbers or other symbols.
  if (text[i] == ' ' && i + 1 < text.size()) {
    const Char next = char_at(text, i + 1);
    if (next.cls != CharClass::space) head = next, j = i + 1;
  }
  if (head.cls != CharClass::space) {
    j += head.len;
    for (Char c; j < text.size() && (c = char_at(text, j)).cls == head.cls;) j += c.len;
    return j;
  }
  // "\s+(?!\S)" leaves a run's last space to the word that follows; "\s+" takes a lone space before a word.
  size_t last = j, count = 0;
  for (Char c; j < text.size() && (c = char_at(text, j)).cls == CharClass::space; ++count)
    last = j, j += c.len;
  return (j < text.size() && count >= 2) ? last : j;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < text.size();) {
    const size_t end = match_end(text, i);
    pieces.push_back(text.substr(i, end - i));
    i = end;
  }
  return pieces;
}

}  // namespace mt
