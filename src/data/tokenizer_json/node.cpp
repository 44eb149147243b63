// tokenizer.json values with their place in the file.
#include "data/tokenizer_json/node.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace mt::tokjson {

namespace {

// A value as the error quotes it: short values whole, long ones cut.
std::string quoted(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

}  // namespace

bool Node::has(const char* key) const {
  return value_->is_object() && value_->contains(key) && !(*value_)[key].is_null();
}

Node Node::at(const char* key) const {
  if (!value_->is_object()) fail("expected an object");
  if (!has(key)) fail(std::string("has no \"") + key + "\"");
  return Node((*value_)[key], file_, key_path(key));
}

Node Node::at(size_t index) const {
  return Node((*value_)[index], file_, path_ + "[" + std::to_string(index) + "]");
}

std::string Node::string(const char* key) const {
  const Node value = at(key);
  if (!value.json().is_string()) value.fail("expected a string, found " + quoted(value.json()));
  return value.json().get<std::string>();
}

std::string Node::string_or(const char* key, const std::string& fallback) const {
  return has(key) ? string(key) : fallback;
}

bool Node::boolean_or(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  const Node value = at(key);
  if (!value.json().is_boolean()) value.fail("expected true or false, found " + quoted(value.json()));
  return value.json().get<bool>();
}

int64_t Node::integer_or(const char* key, int64_t fallback) const {
  if (!has(key)) return fallback;
  const Node value = at(key);
  if (!value.json().is_number_integer()) value.fail("expected an integer, found " + quoted(value.json()));
  return value.json().get<int64_t>();
}

void Node::only(std::initializer_list<const char*> known) const {
  if (!value_->is_object()) fail("expected an object");
  for (const auto& item : value_->items()) {
    const std::string& key = item.key();
    if (item.value().is_null()) continue;
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      unsupported(key.c_str());
    }
  }
}

void Node::unsupported(const char* key) const {
  fail_data(file_ + ": " + key_path(key) + " " + quoted((*value_)[key]) + " is not supported");
}

void Node::fail(const std::string& what) const {
  fail_data(file_ + ": " + (path_.empty() ? "" : path_ + ": ") + what);
}

}  // namespace mt::tokjson
