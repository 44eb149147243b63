// The methods of strings and dicts that chat templates call (s.startswith('x'), d.get('k'), d.items()).
#include <set>

#include "data/jinja/builtins.h"
#include "data/jinja/string_ops.h"

namespace mt::jinja {
namespace {

void arity(const std::string& what, const List& args, const Kwargs& kwargs, size_t least, size_t most) {
  if (!kwargs.empty())
    throw ValueError(what + ": keyword argument '" + kwargs[0].first + "' is not supported");
  if (args.size() < least || args.size() > most)
    throw ValueError(what + " takes " + std::to_string(least) +
                     (most > least ? " to " + std::to_string(most) : "") + " arguments, not " +
                     std::to_string(args.size()));
}

const std::string& text_arg(const std::string& what, const Value& v) {
  if (!v.is_string()) throw ValueError(what + ": expected a string argument, not " + type_name(v));
  return v.str();
}

// startswith/endswith take a string or a list (Python's tuple) of them.
bool affix(const std::string& s, const Value& arg, bool prefix, const std::string& what) {
  if (arg.is_list()) {
    for (const Value& each : arg.list())
      if (affix(s, each, prefix, what)) return true;
    return false;
  }
  const std::string& a = text_arg(what, arg);
  return prefix ? s.starts_with(a) : s.ends_with(a);
}

Value string_method(const std::string& s, const std::string& name, const List& args, const Kwargs& kwargs) {
  const std::string what = "string method '" + name + "'";
  const auto arg = [&](size_t i) { return i < args.size() ? args[i] : Value{}; };
  if (name == "startswith" || name == "endswith") {
    arity(what, args, kwargs, 1, 1);
    return affix(s, args[0], name == "startswith", what);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    arity(what, args, kwargs, 0, 1);
    return strip(s, arg(0), name != "rstrip", name != "lstrip");
  }
  if (name == "split") {
    arity(what, args, kwargs, 0, 2);
    const Value max = arg(1);
    if (!max.undefined() && !max.is_int()) throw ValueError(what + ": maxsplit must be an integer");
    return split(s, arg(0), max.undefined() ? -1 : max.integer());
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    arity(what, args, kwargs, 0, 0);
    if (name == "title") return title(s, false);
    if (name == "capitalize") return capitalize(s);
    return map_case(
        s, name == "upper" ? [](int c) { return std::toupper(c); } : [](int c) { return std::tolower(c); });
  }
  if (name == "replace") {
    arity(what, args, kwargs, 2, 3);
    const Value count = arg(2);
    if (!count.undefined() && !count.is_int()) throw ValueError(what + ": count must be an integer");
    return replace(s, text_arg(what, args[0]), text_arg(what, args[1]),
                   count.undefined() ? -1 : count.integer());
  }
  if (name == "find") {
    arity(what, args, kwargs, 1, 1);
    const size_t at = s.find(text_arg(what, args[0]));
    return at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(code_points(s.substr(0, at)).size());
  }
  arity(what, args, kwargs, 1, 1);  // join
  if (!args[0].is_list()) throw ValueError(what + ": expected a list, not " + type_name(args[0]));
  std::string out;
  for (size_t i = 0; i < args[0].list().size(); ++i) out += (i ? s : "") + text_arg(what, args[0].list()[i]);
  return out;
}

Value dict_method(const Dict& d, const std::string& name, const List& args, const Kwargs& kwargs) {
  const std::string what = "dict method '" + name + "'";
  if (name == "get") {
    arity(what, args, kwargs, 1, 2);
    const Value found = args[0].is_string() ? lookup(d, args[0].str()) : Value{};
    return !found.undefined() ? found : args.size() > 1 ? args[1] : Value(None{});
  }
  arity(what, args, kwargs, 0, 0);
  List out;
  for (const auto& [k, v] : d)
    out.push_back(name == "keys" ? Value(k) : name == "values" ? v : Value(List{Value(k), v}));
  return out;
}

}  // namespace

bool has_method(const Value& object, const std::string& name) {
  static const std::set<std::string> string_methods = {
      "startswith", "endswith", "strip",      "lstrip",  "rstrip", "split", "upper",
      "lower",      "title",    "capitalize", "replace", "find",   "join"};
  static const std::set<std::string> dict_methods = {"get", "items", "keys", "values"};
  if (object.is_string()) return string_methods.count(name) > 0;
  if (object.is_dict()) return dict_methods.count(name) > 0;
  return false;
}

Value call_method(const Value& object, const std::string& name, const List& args, const Kwargs& kwargs) {
  if (!has_method(object, name))
    throw ValueError("method '" + name + "' of " + type_name(object) + " is not supported");
  if (object.is_string()) return string_method(object.str(), name, args, kwargs);
  return dict_method(object.dict(), name, args, kwargs);
}

}  // namespace mt::jinja
