// A value of a tokenizer.json with its place in the file ("pre_tokenizer.pretokenizers[0]"), so that every
// error names the key and value it is about, and what memtrain does not implement is refused, never skipped.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

namespace mt::tokjson {

class Node {
 public:
  Node(const nlohmann::json& value, std::string file, std::string path)
      : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& json() const { return *value_; }
  const std::string& file() const { return file_; }
  bool has(const char* key) const;  // present and not null
  Node at(const char* key) const;   // required
  Node at(size_t index) const;
  size_t size() const { return value_->size(); }
  std::string string(const char* key) const;
  std::string string_or(const char* key, const std::string& fallback) const;
  bool boolean_or(const char* key, bool fallback) const;
  int64_t integer_or(const char* key, int64_t fallback) const;

  // Refuses every key outside `known` that has a non-null value.
  void only(std::initializer_list<const char*> known) const;
  // "FILE: PATH.key VALUE is not supported".
  [[noreturn]] void unsupported(const char* key) const;
  // "FILE: PATH: what".
  [[noreturn]] void fail(const std::string& what) const;

 private:
  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  const nlohmann::json* value_;
  std::string file_, path_;
};

}  // namespace mt::tokjson
