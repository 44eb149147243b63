// What a template can call: filters (`x | trim`), tests (`x is defined`), the methods of strings and dicts
// (`s.startswith('a')`, `d.items()`) and the operators. Filter and test names are checked when a template is
// parsed; a method, an argument or an operand of the wrong type is a ValueError the evaluator names the line
// of. Strings are UTF-8; lengths, indices and slices count code points, as Python's do.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "data/jinja/value.h"

namespace mt::jinja {

using Kwargs = std::vector<std::pair<std::string, Value>>;

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& operand, const List& args, const Kwargs& kwargs);
bool apply_test(const std::string& name, const Value& operand, const List& args);

// `object.name(args)` for a string or dict; anything else is a ValueError naming the method and the type.
Value call_method(const Value& object, const std::string& name, const List& args, const Kwargs& kwargs);
// Whether `name` is a method of the object's type (so that `object.name` without a call is refused).
bool has_method(const Value& object, const std::string& name);

// Binary operators (+ - * / // % ** ~ == != < > <= >= in, not in) and unary - and +.
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value unary_op(const std::string& op, const Value& a);

// Python's indexing and slicing of a list or string (negative indices from the end); undefined out of range.
Value index_value(const Value& object, const Value& key);
Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step);

// A sequence's items, as a for loop and the filters take them: a list's, a dict's keys, a string's code
// points; none for undefined. Anything else is a ValueError naming `what`.
List items_of(const Value& v, const std::string& what);

// The code points of a UTF-8 string, each as its bytes.
std::vector<std::string> code_points(const std::string& s);

}  // namespace mt::jinja
