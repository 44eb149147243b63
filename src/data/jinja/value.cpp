// Python's semantics for the values of value.h: truth, str(), repr(), json.dumps, == and <.
#include "data/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace mt::jinja {
namespace {

// float.__repr__: the shortest digits that round-trip, fixed from 1e-4 up to 1e16, else with an exponent of
// at least two digits.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c >= '0' && c <= '9') digits += c;
  const int exponent = std::stoi(sci.substr(e + 1));
  // Appended piece by piece: GCC 12 warns (-Wrestrict) on chains of + here.
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) out.append(".").append(digits, 1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out.append(exp);
  }
  if (exponent < 0) return out.append("0.").append(static_cast<size_t>(-exponent - 1), '0').append(digits);
  const size_t point = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= point) return out.append(digits).append(point - digits.size(), '0').append(".0");
  return out.append(digits, 0, point).append(".").append(digits, point);
}

std::string string_repr(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\u%04x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// A newline and `depth` levels of indentation with an indent, nothing without.
std::string json_break(int indent, int depth) {
  if (indent < 0) return {};
  std::string out = "\n";
  return out.append(static_cast<size_t>(indent * depth), ' ');
}

void dump_json(const Value& v, int indent, int depth, std::string& out) {
  const std::string inner = json_break(indent, depth + 1), outer = json_break(indent, depth);
  const std::string comma = indent < 0 ? ", " : ",";
  if (v.is_list()) {
    if (v.list().empty()) return void(out += "[]");
    out += "[";
    for (size_t i = 0; i < v.list().size(); ++i) {
      out += (i ? comma : "") + inner;
      dump_json(v.list()[i], indent, depth + 1, out);
    }
    out += outer + "]";
  } else if (v.is_dict() || v.is_namespace()) {
    const Dict& d = v.is_dict() ? v.dict() : v.ns().attributes;
    if (d.empty()) return void(out += "{}");
    out += "{";
    for (size_t i = 0; i < d.size(); ++i) {
      out += (i ? comma : "") + inner + json_string(d[i].first) + ": ";
      dump_json(d[i].second, indent, depth + 1, out);
    }
    out += outer + "}";
  } else if (v.none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.boolean() ? "true" : "false";
  } else if (v.is_float()) {
    out += std::isnan(v.number())   ? "NaN"
           : std::isinf(v.number()) ? (v.number() < 0 ? "-Infinity" : "Infinity")
                                    : float_repr(v.number());
  } else if (v.is_int()) {
    out += std::to_string(v.integer());
  } else if (v.is_string()) {
    out += json_string(v.str());
  } else {
    throw ValueError("tojson: " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string type_name(const Value& v) {
  static const char* const names[] = {"undefined", "none",   "a bool", "an int",      "a float",
                                      "a string",  "a list", "a dict", "a namespace", "a macro"};
  return names[v.v.index()];
}

bool truthy(const Value& v) {
  if (v.undefined() || v.none()) return false;
  if (v.is_bool()) return v.boolean();
  if (v.is_number()) return v.number() != 0;
  if (v.is_string()) return !v.str().empty();
  if (v.is_list()) return !v.list().empty();
  if (v.is_dict()) return !v.dict().empty();
  return true;
}

std::string to_str(const Value& v) {
  if (v.undefined()) return "";
  if (v.is_string()) return v.str();
  return to_repr(v);
}

std::string to_repr(const Value& v) {
  if (v.undefined()) return "";
  if (v.none()) return "None";
  if (v.is_bool()) return v.boolean() ? "True" : "False";
  if (v.is_int()) return std::to_string(v.integer());
  if (v.is_float()) return float_repr(v.number());
  if (v.is_string()) return string_repr(v.str());
  if (v.is_list()) {
    std::string out = "[";
    for (size_t i = 0; i < v.list().size(); ++i) out += (i ? ", " : "") + to_repr(v.list()[i]);
    return out + "]";
  }
  if (v.is_dict()) {
    std::string out = "{";
    for (size_t i = 0; i < v.dict().size(); ++i)
      out += (i ? ", " : "") + string_repr(v.dict()[i].first) + ": " + to_repr(v.dict()[i].second);
    return out + "}";
  }
  return v.is_namespace() ? "<Namespace>" : "<Macro>";
}

std::string to_json_text(const Value& v, int indent) {
  std::string out;
  dump_json(v, indent, 0, out);
  return out;
}

bool equals(const Value& a, const Value& b) {
  const bool a_num = a.is_number() || a.is_bool(), b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    const auto n = [](const Value& x) { return x.is_bool() ? (x.boolean() ? 1.0 : 0.0) : x.number(); };
    return n(a) == n(b);
  }
  if (a.v.index() != b.v.index()) return false;
  if (a.is_string()) return a.str() == b.str();
  if (a.is_list()) {
    if (a.list().size() != b.list().size()) return false;
    for (size_t i = 0; i < a.list().size(); ++i)
      if (!equals(a.list()[i], b.list()[i])) return false;
    return true;
  }
  if (a.is_dict()) {
    if (a.dict().size() != b.dict().size()) return false;
    for (const auto& [key, value] : a.dict()) {
      const Value other = lookup(b.dict(), key);
      if (other.undefined() || !equals(value, other)) return false;
    }
    return true;
  }
  if (a.is_namespace()) return &a.ns() == &b.ns();
  if (a.is_macro()) return &a.macro() == &b.macro();
  return true;  // undefined, none
}

bool less(const Value& a, const Value& b, bool& comparable) {
  comparable = true;
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    const auto n = [](const Value& x) { return x.is_bool() ? (x.boolean() ? 1.0 : 0.0) : x.number(); };
    return n(a) < n(b);
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list()) {
    const List &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less(x[i], y[i], comparable)) return true;
      if (!comparable || less(y[i], x[i], comparable)) return false;
    }
    return x.size() < y.size();
  }
  comparable = false;
  return false;
}

Value lookup(const Dict& d, const std::string& key) {
  for (const auto& [k, v] : d)
    if (k == key) return v;
  return {};
}

Value from_json(const nlohmann::ordered_json& j) {
  if (j.is_null()) return None{};
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  if (j.is_array()) {
    List l;
    for (const auto& e : j) l.push_back(from_json(e));
    return l;
  }
  Dict d;
  for (const auto& [k, e] : j.items()) d.emplace_back(k, from_json(e));
  return d;
}

}  // namespace mt::jinja
