// Python's operators, indexing and slicing on template values.
#include <algorithm>
#include <climits>
#include <cmath>

#include "data/jinja/builtins.h"
#include "data/utf8.h"

namespace mt::jinja {
namespace {

bool numeric(const Value& v) {
  return v.is_number() || v.is_bool();
}
int64_t as_int(const Value& v) {
  return v.is_bool() ? (v.boolean() ? 1 : 0) : v.integer();
}
bool integral(const Value& v) {
  return v.is_int() || v.is_bool();
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw ValueError("unsupported operand types for " + op + ": " + type_name(a) + " and " + type_name(b));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (integral(a) && integral(b) && op != "/") {
    const int64_t x = as_int(a), y = as_int(b);
    if ((op == "//" || op == "%") && y == 0) throw ValueError("integer division or modulo by zero");
    int64_t r = 1;
    bool overflow = (op == "//" || op == "%") && y == -1 && x == INT64_MIN;
    if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
    if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
    if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
    if (op == "**" && y >= 0)
      for (int64_t k = 0; k < y && !overflow; ++k) overflow = __builtin_mul_overflow(r, x, &r);
    if (overflow) throw ValueError("integer " + op + " overflows 64 bits");
    if (op == "//") return x / y - ((x % y != 0 && (x < 0) != (y < 0)) ? 1 : 0);
    if (op == "%") return x % y != 0 && (x % y < 0) != (y < 0) ? x % y + y : x % y;
    if (op != "**" || y >= 0) return r;
  }
  const double x = a.is_bool() ? as_int(a) : a.number(), y = b.is_bool() ? as_int(b) : b.number();
  if ((op == "/" || op == "//" || op == "%") && y == 0) throw ValueError("float division by zero");
  if (op == "+") return x + y;
  if (op == "-") return x - y;
  if (op == "*") return x * y;
  if (op == "/") return x / y;
  if (op == "//") return std::floor(x / y);
  if (op == "%") return x - std::floor(x / y) * y;
  return std::pow(x, y);
}

// Python's sequence * n; a result beyond 1 GiB (or a billion items) is refused, not attempted.
Value repeat(const Value& seq, int64_t times) {
  const size_t size = seq.is_string() ? seq.str().size() : seq.list().size();
  if (times > 0 && size > 0 && static_cast<uint64_t>(times) > (uint64_t{1} << 30) / size)
    throw ValueError("a sequence repeated " + std::to_string(times) + " times is too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return out;
  }
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return out;
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) throw ValueError("'in <string>' requires a string, not " + type_name(item));
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.list())
      if (equals(v, item)) return true;
    return false;
  }
  if (container.is_dict()) return item.is_string() && !lookup(container.dict(), item.str()).undefined();
  if (container.undefined()) return false;
  throw ValueError("'in' needs a string, list or dict on its right, not " + type_name(container));
}

// A Python index: negative from the end; -1 when out of range.
int64_t resolve_index(const Value& key, size_t size) {
  if (!integral(key)) throw ValueError("an index must be an integer, not " + type_name(key));
  int64_t i = as_int(key);
  if (i < 0) i += static_cast<int64_t>(size);
  return i < 0 || i >= static_cast<int64_t>(size) ? -1 : i;
}

}  // namespace

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    int32_t cp;
    const size_t n = next_utf8(s, i, &cp);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return to_str(a) + to_str(b);
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    bool comparable = true;
    const bool lt = op == "<" || op == ">=" ? less(a, b, comparable) : less(b, a, comparable);
    if (!comparable) unsupported(op, a, b);
    return op == "<" || op == ">" ? lt : !lt;
  }
  if (numeric(a) && numeric(b)) return arithmetic(op, a, b);
  if (op == "+" && a.is_string() && b.is_string()) return a.str() + b.str();
  if (op == "+" && a.is_list() && b.is_list()) {
    List out = a.list();
    out.insert(out.end(), b.list().begin(), b.list().end());
    return out;
  }
  if (op == "*" && (a.is_string() || a.is_list()) && integral(b)) return repeat(a, as_int(b));
  if (op == "*" && integral(a) && (b.is_string() || b.is_list())) return repeat(b, as_int(a));
  unsupported(op, a, b);
}

Value unary_op(const std::string& op, const Value& a) {
  if (!numeric(a)) throw ValueError("bad operand type for unary " + op + ": " + type_name(a));
  if (op == "+") return integral(a) ? Value(as_int(a)) : a;
  if (integral(a) && as_int(a) == INT64_MIN) throw ValueError("integer - overflows 64 bits");
  return integral(a) ? Value(-as_int(a)) : Value(-a.number());
}

Value index_value(const Value& object, const Value& key) {
  if (object.is_dict()) return key.is_string() ? lookup(object.dict(), key.str()) : Value{};
  if (object.is_namespace()) return key.is_string() ? lookup(object.ns().attributes, key.str()) : Value{};
  if (object.is_list()) {
    const int64_t i = resolve_index(key, object.list().size());
    return i < 0 ? Value{} : object.list()[static_cast<size_t>(i)];
  }
  if (object.is_string()) {
    const std::vector<std::string> chars = code_points(object.str());
    const int64_t i = resolve_index(key, chars.size());
    return i < 0 ? Value{} : Value(chars[static_cast<size_t>(i)]);
  }
  if (object.undefined()) throw ValueError("cannot index undefined with " + to_repr(key));
  return {};
}

Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step) {
  const auto bound = [](const Value& v, const char* what) {
    if (!v.undefined() && !v.none() && !integral(v))
      throw ValueError(std::string("a slice's ") + what + " must be an integer, not " + type_name(v));
  };
  bound(start, "start");
  bound(stop, "stop");
  bound(step, "step");
  const int64_t s = step.undefined() || step.none() ? 1 : as_int(step);
  if (s == 0) throw ValueError("slice step cannot be zero");
  const bool is_string = object.is_string();
  if (!is_string && !object.is_list()) throw ValueError("cannot slice " + type_name(object));
  const std::vector<std::string> chars = is_string ? code_points(object.str()) : std::vector<std::string>{};
  const int64_t n = static_cast<int64_t>(is_string ? chars.size() : object.list().size());
  // Python's slice.indices().
  const auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.undefined() || v.none()) return fallback;
    int64_t i = as_int(v);
    if (i < 0) i += n;
    return s > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t first = clamp(start, s > 0 ? 0 : n - 1), last = clamp(stop, s > 0 ? n : -1);
  std::string text;
  List items;
  for (int64_t i = first; s > 0 ? i < last : i > last; i += s) {
    if (is_string)
      text += chars[static_cast<size_t>(i)];
    else
      items.push_back(object.list()[static_cast<size_t>(i)]);
  }
  return is_string ? Value(text) : Value(items);
}

}  // namespace mt::jinja
