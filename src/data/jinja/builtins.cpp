// Filters and tests: each a function of its operand and arguments, by name in a table.
#include "data/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "data/jinja/string_ops.h"

namespace mt::jinja {
namespace {

// The arguments of one call: positional ones in order, then by keyword; absent ones undefined.
struct Args {
  const std::string& what;  // "filter 'join'", for errors
  const List& positional;
  const Kwargs& kwargs;

  Value get(size_t index, const char* keyword) const {
    if (index < positional.size()) return positional[index];
    for (const auto& [k, v] : kwargs)
      if (k == keyword) return v;
    return {};
  }
  void at_most(size_t count, std::initializer_list<const char*> keywords) const {
    if (positional.size() > count)
      throw ValueError(what + " takes at most " + std::to_string(count) + " arguments");
    for (const auto& kw : kwargs) {
      bool known = false;
      for (const char* k : keywords) known = known || kw.first == k;
      if (!known) throw ValueError(what + ": argument '" + kw.first + "' is not supported");
    }
  }
  const std::string& text(size_t index, const char* keyword) const {
    const Value& v = positional.size() > index ? positional[index] : kwargs_value(keyword);
    if (!v.is_string())
      throw ValueError(what + ": argument " + keyword + " must be a string, not " + type_name(v));
    return v.str();
  }

 private:
  const Value& kwargs_value(const char* keyword) const {
    for (const auto& [k, v] : kwargs)
      if (k == keyword) return v;
    static const Value missing;
    return missing;
  }
};

const std::string& need_string(const Value& v, const std::string& what) {
  if (!v.is_string()) throw ValueError(what + " needs a string, not " + type_name(v));
  return v.str();
}

int64_t int_arg(const Value& v, int64_t fallback, const std::string& what) {
  if (v.undefined() || v.none()) return fallback;
  if (!v.is_int()) throw ValueError(what + ": expected an integer, not " + type_name(v));
  return v.integer();
}

int64_t length_of(const Value& v) {
  if (v.is_dict()) return static_cast<int64_t>(v.dict().size());
  return static_cast<int64_t>(items_of(v, "length").size());
}

List pairs_of(const Dict& d) {
  List out;
  for (const auto& [k, v] : d) out.push_back(List{Value(k), v});
  return out;
}

using Filter = std::function<Value(const Value&, const Args&)>;

using Filters = std::map<std::string, Filter>;

// Filters of strings and of any value's text.
Filters text_filters() {
  return {
      {"trim",
       [](const Value& v, const Args& a) {
         a.at_most(1, {"chars"});
         return Value(strip(need_string(v, a.what), a.get(0, "chars"), true, true));
       }},
      {"tojson",
       [](const Value& v, const Args& a) {
         a.at_most(1, {"indent"});
         return Value(to_json_text(v, static_cast<int>(int_arg(a.get(0, "indent"), -1, a.what))));
       }},
      {"upper",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         return Value(map_case(need_string(v, a.what), [](int c) { return std::toupper(c); }));
       }},
      {"lower",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         return Value(map_case(need_string(v, a.what), [](int c) { return std::tolower(c); }));
       }},
      {"capitalize",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         return Value(capitalize(need_string(v, a.what)));
       }},
      {"title",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         return Value(title(need_string(v, a.what), true));
       }},
      {"default",
       [](const Value& v, const Args& a) {
         a.at_most(2, {"default_value", "boolean"});
         const bool use_default = truthy(a.get(1, "boolean")) ? !truthy(v) : v.undefined();
         const Value fallback = a.get(0, "default_value");
         return use_default ? (fallback.undefined() ? Value("") : fallback) : v;
       }},
      {"replace",
       [](const Value& v, const Args& a) {
         a.at_most(3, {"old", "new", "count"});
         return Value(replace(need_string(v, a.what), a.text(0, "old"), a.text(1, "new"),
                              int_arg(a.get(2, "count"), -1, a.what)));
       }},
      {"string",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         return Value(to_str(v));
       }},
  };
}

// Filters of sequences and numbers.
Filters sequence_filters() {
  return {
      {"length",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         return Value(length_of(v));
       }},
      {"count",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         return Value(length_of(v));
       }},
      {"join",
       [](const Value& v, const Args& a) {
         a.at_most(1, {"d"});
         const Value sep = a.get(0, "d");
         std::string out;
         const List items = items_of(v, a.what);
         for (size_t i = 0; i < items.size(); ++i) out += (i ? to_str(sep) : "") + to_str(items[i]);
         return Value(out);
       }},
      {"first",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         const List items = items_of(v, a.what);
         return items.empty() ? Value{} : items.front();
       }},
      {"last",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         const List items = items_of(v, a.what);
         return items.empty() ? Value{} : items.back();
       }},
      {"list",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         return Value(items_of(v, a.what));
       }},
      {"reverse",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         List items = items_of(v, a.what);
         std::reverse(items.begin(), items.end());
         if (!v.is_string()) return Value(items);
         std::string out;
         for (const Value& c : items) out += c.str();
         return Value(out);
       }},
      {"items",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         if (v.undefined()) return Value(List{});
         if (!v.is_dict()) throw ValueError(a.what + " needs a dict, not " + type_name(v));
         return Value(pairs_of(v.dict()));
       }},
      {"int",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         if (v.is_float()) return Value(static_cast<int64_t>(v.number()));
         if (v.is_bool()) return Value(int64_t{v.boolean()});
         if (v.is_int()) return v;
         if (v.is_string()) {
           try {
             return Value(static_cast<int64_t>(std::stoll(v.str())));
           } catch (...) {
           }
         }
         return Value(int64_t{0});
       }},
      {"abs",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         if (v.is_int()) return Value(v.integer() < 0 ? -v.integer() : v.integer());
         if (v.is_float()) return Value(std::abs(v.number()));
         throw ValueError(a.what + " needs a number, not " + type_name(v));
       }},
  };
}

// An item's attribute for map and selectattr: a dict's key, "a.b" a path of them; undefined when missing.
Value attribute_of(const Value& item, const Value& path, const std::string& what) {
  if (!path.is_string()) throw ValueError(what + ": the attribute must be a string, not " + type_name(path));
  Value v = item;
  for (const Value& key : split(path.str(), Value("."), -1)) {
    if (!v.is_dict()) return {};
    v = lookup(v.dict(), key.str());
  }
  return v;
}

// select/reject(test, args...) and selectattr/rejectattr(attribute, test, args...): the items whose value
// passes the named test (or is true without one) are kept, or dropped.
Value select(const Value& v, const Args& a, bool by_attribute, bool keep) {
  if (!a.kwargs.empty()) throw ValueError(a.what + ": keyword arguments are not supported");
  const size_t test_at = by_attribute ? 1 : 0;
  if (by_attribute && a.positional.empty()) throw ValueError(a.what + " needs an attribute");
  const Value test = a.get(test_at, "");
  if (!test.undefined() && !(test.is_string() && has_test(test.str())))
    throw ValueError(a.what + ": test " + to_repr(test) + " is not supported");
  const List test_args(a.positional.begin() + std::min(a.positional.size(), test_at + 1), a.positional.end());
  List out;
  for (const Value& item : items_of(v, a.what)) {
    const Value subject = by_attribute ? attribute_of(item, a.positional[0], a.what) : item;
    const bool passes = test.undefined() ? truthy(subject) : apply_test(test.str(), subject, test_args);
    if (passes == keep) out.push_back(item);
  }
  return out;
}

// Filters that pick or map the items of a sequence.
Filters selection_filters() {
  return {
      {"select", [](const Value& v, const Args& a) { return select(v, a, false, true); }},
      {"reject", [](const Value& v, const Args& a) { return select(v, a, false, false); }},
      {"selectattr", [](const Value& v, const Args& a) { return select(v, a, true, true); }},
      {"rejectattr", [](const Value& v, const Args& a) { return select(v, a, true, false); }},
      {"map",
       [](const Value& v, const Args& a) {
         a.at_most(0, {"attribute", "default"});
         const Value attribute = a.get(0, "attribute"), fallback = a.get(0, "default");
         if (attribute.undefined()) throw ValueError(a.what + " is supported with attribute= only");
         List out;
         for (const Value& item : items_of(v, a.what)) {
           const Value got = attribute_of(item, attribute, a.what);
           out.push_back(got.undefined() && !fallback.undefined() ? fallback : got);
         }
         return Value(out);
       }},
      {"unique",
       [](const Value& v, const Args& a) {
         a.at_most(0, {});
         List out;
         for (const Value& item : items_of(v, a.what)) {
           bool seen = false;
           for (const Value& kept : out) seen = seen || equals(kept, item);
           if (!seen) out.push_back(item);
         }
         return Value(out);
       }},
  };
}

const Filters& filters() {
  static const Filters table = [] {
    Filters all = text_filters();
    all.merge(sequence_filters());
    all.merge(selection_filters());
    return all;
  }();
  return table;
}

using Test = std::function<bool(const Value&, const List&)>;

const std::map<std::string, Test>& tests() {
  const auto arg = [](const List& args) {
    if (args.size() != 1) throw ValueError("the test takes one argument");
    return args[0];
  };
  static const std::map<std::string, Test> table = {
      {"defined", [](const Value& v, const List&) { return !v.undefined(); }},
      {"undefined", [](const Value& v, const List&) { return v.undefined(); }},
      {"none", [](const Value& v, const List&) { return v.none(); }},
      {"string", [](const Value& v, const List&) { return v.is_string(); }},
      {"number", [](const Value& v, const List&) { return v.is_number(); }},
      {"integer", [](const Value& v, const List&) { return v.is_int(); }},
      {"float", [](const Value& v, const List&) { return v.is_float(); }},
      {"boolean", [](const Value& v, const List&) { return v.is_bool(); }},
      {"true", [](const Value& v, const List&) { return v.is_bool() && v.boolean(); }},
      {"false", [](const Value& v, const List&) { return v.is_bool() && !v.boolean(); }},
      {"mapping", [](const Value& v, const List&) { return v.is_dict(); }},
      {"iterable", [](const Value& v,
                      const List&) { return v.is_list() || v.is_dict() || v.is_string() || v.undefined(); }},
      {"sequence", [](const Value& v,
                      const List&) { return v.is_list() || v.is_dict() || v.is_string() || v.undefined(); }},
      {"callable", [](const Value& v, const List&) { return v.is_macro(); }},
      {"even", [](const Value& v, const List&) { return v.is_int() && v.integer() % 2 == 0; }},
      {"odd", [](const Value& v, const List&) { return v.is_int() && v.integer() % 2 != 0; }},
      {"eq", [arg](const Value& v, const List& args) { return equals(v, arg(args)); }},
      {"equalto", [arg](const Value& v, const List& args) { return equals(v, arg(args)); }},
      {"ne", [arg](const Value& v, const List& args) { return !equals(v, arg(args)); }},
      {"in", [arg](const Value& v, const List& args) { return truthy(binary_op("in", v, arg(args))); }},
  };
  return table;
}

}  // namespace

List items_of(const Value& v, const std::string& what) {
  if (v.is_list()) return v.list();
  if (v.is_dict()) {
    List keys;
    for (const auto& kv : v.dict()) keys.push_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    List chars;
    for (auto& c : code_points(v.str())) chars.push_back(c);
    return chars;
  }
  if (v.undefined()) return {};
  throw ValueError(what + " needs a list, dict or string, not " + type_name(v));
}

bool has_filter(const std::string& name) {
  return filters().count(name) > 0;
}
bool has_test(const std::string& name) {
  return tests().count(name) > 0;
}

Value apply_filter(const std::string& name, const Value& operand, const List& args, const Kwargs& kwargs) {
  const std::string what = "filter '" + name + "'";
  return filters().at(name)(operand, Args{what, args, kwargs});
}

bool apply_test(const std::string& name, const Value& operand, const List& args) {
  return tests().at(name)(operand, args);
}

}  // namespace mt::jinja
