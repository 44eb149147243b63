// The values a chat template computes with: Python's as Jinja sees them (none, bool, int, float, string,
// list, dict), plus Jinja's undefined, a namespace() and a macro. Lists and dicts are shared (Python's
// references), so `ns.x = ...` and a list a macro returns behave as in Python; dicts keep insertion order, as
// tojson shows.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace mt::jinja {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order; keys are strings
struct Macro;

// A type error in an operation on values (Python's TypeError); the evaluator names the template line.
struct ValueError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Undefined {};
struct None {};
struct Namespace {
  Dict attributes;
};

struct Value {
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Dict>, std::shared_ptr<Namespace>, std::shared_ptr<const Macro>>
      v;

  Value() = default;
  Value(None n) : v(n) {}
  Value(bool b) : v(b) {}
  Value(int64_t i) : v(i) {}
  Value(int i) : v(static_cast<int64_t>(i)) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(const char* s) : v(std::string(s)) {}
  Value(List l) : v(std::make_shared<List>(std::move(l))) {}
  Value(Dict d) : v(std::make_shared<Dict>(std::move(d))) {}
  Value(std::shared_ptr<Namespace> n) : v(std::move(n)) {}
  Value(std::shared_ptr<const Macro> m) : v(std::move(m)) {}

  bool undefined() const { return std::holds_alternative<Undefined>(v); }
  bool none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(v); }
  bool is_namespace() const { return std::holds_alternative<std::shared_ptr<Namespace>>(v); }
  bool is_macro() const { return std::holds_alternative<std::shared_ptr<const Macro>>(v); }

  const std::string& str() const { return std::get<std::string>(v); }
  const List& list() const { return *std::get<std::shared_ptr<List>>(v); }
  const Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(v); }
  Namespace& ns() const { return *std::get<std::shared_ptr<Namespace>>(v); }
  const Macro& macro() const { return *std::get<std::shared_ptr<const Macro>>(v); }
  double number() const { return is_int() ? static_cast<double>(std::get<int64_t>(v)) : std::get<double>(v); }
  int64_t integer() const { return std::get<int64_t>(v); }
  bool boolean() const { return std::get<bool>(v); }
};

// A type's name in errors: "a string", "a list", "undefined", ...
std::string type_name(const Value& v);

// Python's bool(): empty strings, lists and dicts, 0, none and undefined are false.
bool truthy(const Value& v);

// Python's str() (what {{ }} prints; undefined prints nothing) and repr() (inside lists and dicts).
std::string to_str(const Value& v);
std::string to_repr(const Value& v);

// json.dumps(v, ensure_ascii=False, indent=indent) as transformers' tojson filter; indent < 0: none.
std::string to_json_text(const Value& v, int indent);

// Python's ==, and < for numbers, strings and lists (false, with `comparable` false, for other types).
bool equals(const Value& a, const Value& b);
bool less(const Value& a, const Value& b, bool& comparable);

// The value at a key of a dict or namespace; undefined when missing.
Value lookup(const Dict& d, const std::string& key);

// JSON (a record's messages, tools) to values and back; key order is kept.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace mt::jinja
