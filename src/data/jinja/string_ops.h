// Python's str methods that templates call, shared by the filters and the methods (builtins.h).
#pragma once

#include <cstdint>
#include <string>

#include "data/jinja/value.h"

namespace mt::jinja {

// Python's whitespace, in the ASCII range.
bool py_space(unsigned char c);
// str.strip/lstrip/rstrip(chars): chars a string of code points, or undefined/none for whitespace
// (Unicode's).
std::string strip(const std::string& s, const Value& chars, bool left, bool right);
// str.upper/lower with toupper/tolower, on ASCII letters.
std::string map_case(std::string s, int (*f)(int));
std::string capitalize(const std::string& s);
// str.title(), where a word starts after any non-letter; with jinja_words Jinja's title filter, where a word
// starts after whitespace, -, (, {, [ or <.
std::string title(const std::string& s, bool jinja_words);
// str.replace(from, to, count); count < 0: all.
std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
// str.split(sep=None, maxsplit=-1).
List split(const std::string& s, const Value& sep, int64_t maxsplit);

}  // namespace mt::jinja
