// A parsed chat template: expressions and statements, each with the line it came from.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/jinja/value.h"

namespace mt::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// One node type for expressions; `args` by kind:
//   literal: -; name: -; attribute: object (name: the attribute); index: object, key;
//   slice: object, start, stop, step (null when left out); call: callee, positional arguments (+ kwargs);
//   filter / test: operand, arguments (+ kwargs; name: the filter or test, negated: `is not`);
//   unary: operand (name: - or +); binary: left, right (name: the operator, `in`, `not in` included);
//   logical and / or, not; conditional: value, condition, else value (null: undefined);
//   list: items; dict: key, value, key, value, ...
struct Expr {
  enum class Kind {
    literal,
    name,
    attribute,
    index,
    slice,
    call,
    filter,
    test,
    unary,
    binary,
    logical_and,
    logical_or,
    logical_not,
    conditional,
    list,
    dict
  };
  Kind kind;
  int line;
  std::string name;
  Value literal;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// A statement or output. By kind:
//   text: text; output: expr; if: conditions[i] guards bodies[i], a last body without condition is else;
//   for: targets in expr (if condition), bodies[0] the loop, bodies[1] its else when given;
//   set: targets = expr, or attribute of targets[0] (a namespace) = expr, or targets[0] = bodies[0]'s output;
//   macro: name, targets the parameters, defaults beside them (null: none), bodies[0];
//   break, continue; generation: bodies[0], the text a model generates (transformers' {% generation %}).
struct Node {
  enum class Kind { text, output, if_, for_, set, macro, break_, continue_, generation };
  Kind kind;
  int line;
  std::string text;
  ExprPtr expr;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<ExprPtr> defaults;
};

struct Macro {
  const Node* node;
};

}  // namespace mt::jinja
