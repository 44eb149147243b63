// The names of a mode's values, one table per enum: the command line parses with it and prints with it.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/word_list.h"

namespace mt {

template <typename E, size_t N>
struct NameTable {
  std::array<std::pair<E, std::string_view>, N> entries;

  constexpr std::optional<E> parse(std::string_view name) const {
    for (const auto& [value, text] : entries)
      if (text == name) return value;
    return std::nullopt;
  }
  // Empty for a value without a name (a mode's "not given").
  constexpr std::string_view name(E value) const {
    for (const auto& [v, text] : entries)
      if (v == value) return text;
    return {};
  }
  // The value named `name`, or a usage error naming the flag: `FLAG NAME: expected a, b or c`.
  E parse_or_fail(std::string_view flag, const std::string& name) const {
    if (const std::optional<E> value = parse(name)) return *value;
    fail_usage(std::string(flag) + " " + name + ": expected " + list());
  }
  // "a, b or c", for messages.
  std::string list(std::string_view last = " or ") const {
    std::vector<std::string> words;
    for (const auto& entry : entries) words.emplace_back(entry.second);
    return word_list(words, last);
  }
};

// Values with their names, for a mode whose values are not all named (or not an enum).
template <typename E, typename... Names>
constexpr NameTable<E, sizeof...(Names)> name_table(std::pair<E, Names>... entries) {
  return {{std::pair<E, std::string_view>(entries.first, entries.second)...}};
}

// The names of an enum's values in declaration order (values 0, 1, ...): every value named.
template <typename E, typename... Names>
constexpr NameTable<E, sizeof...(Names)> names_in_order(Names... names) {
  NameTable<E, sizeof...(Names)> table{};
  int value = 0;
  ((table.entries[value] = {static_cast<E>(value), std::string_view(names)}, ++value), ...);
  return table;
}

}  // namespace mt
