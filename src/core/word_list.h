// Lists in messages: "a", "a or b", "a, b or c".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mt {

// The words separated by ", ", the last two by `last` (" or ", " and ").
inline std::string word_list(const std::vector<std::string>& words, std::string_view last) {
  std::string s;
  for (size_t i = 0; i < words.size(); ++i)
    s += std::string(i == 0 ? "" : i + 1 == words.size() ? last : ", ") + words[i];
  return s;
}

}  // namespace mt
