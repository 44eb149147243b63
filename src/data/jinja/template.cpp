// The evaluator: statements write to an output string, expressions evaluate to values. Scopes as Jinja's: a
// for loop's body is its own scope per iteration (a `set` there stays there; a namespace carries values out),
// an if is not; a macro sees the template's top level and its parameters.
#include "data/jinja/template.h"

#include <unordered_map>

#include "data/jinja/builtins.h"
#include "data/jinja/parser.h"

namespace mt::jinja {
namespace {

enum class Flow { normal, break_loop, continue_loop };
using Scope = std::unordered_map<std::string, Value>;

constexpr int kMaxMacroDepth = 64;  // a macro calling itself without end would otherwise exhaust the stack

class Evaluator {
 public:
  explicit Evaluator(const Dict& context) {
    scopes_.emplace_back();
    for (const auto& [k, v] : context) scopes_.back()[k] = v;
  }

  // Renders the template's body into out, the [start, end) of each generation block into spans.
  void render(const Body& body, std::string& out, std::vector<std::pair<size_t, size_t>>& spans) {
    top_ = &out;
    exec(body, out);
    spans = std::move(spans_);
  }

 private:
  Flow exec(const Body& body, std::string& out) {
    for (const NodePtr& node : body) {
      const Flow flow = exec(*node, out);
      if (flow != Flow::normal) return flow;
    }
    return Flow::normal;
  }

  Flow exec(const Node& node, std::string& out) {
    switch (node.kind) {
      case Node::Kind::text:
        out += node.text;
        return Flow::normal;
      case Node::Kind::output:
        out += to_str(eval(*node.expr));
        return Flow::normal;
      case Node::Kind::if_:
        for (size_t i = 0; i < node.bodies.size(); ++i)
          if (i >= node.conditions.size() || truthy(eval(*node.conditions[i])))
            return exec(node.bodies[i], out);
        return Flow::normal;
      case Node::Kind::for_:
        exec_for(node, out);
        return Flow::normal;
      case Node::Kind::set:
        exec_set(node);
        return Flow::normal;
      case Node::Kind::macro:
        scopes_.back()[node.text] = Value(std::make_shared<const Macro>(Macro{&node}));
        return Flow::normal;
      case Node::Kind::generation:
        return exec_generation(node, out);
      case Node::Kind::break_:
        return Flow::break_loop;
      case Node::Kind::continue_:
        return Flow::continue_loop;
    }
    return Flow::normal;
  }

  // Offsets are into the rendered text: a block writing into a set block or a macro's text has none.
  Flow exec_generation(const Node& node, std::string& out) {
    if (&out != top_)
      throw TemplateError(node.line, "a generation block inside a set block or a macro is not supported");
    const size_t start = out.size();
    const Flow flow = exec(node.bodies[0], out);
    spans_.emplace_back(start, out.size());
    return flow;
  }

  List iterate(const Value& v, int line) {
    if (!v.is_list() && !v.undefined() && !v.is_dict() && !v.is_string())
      throw TemplateError(line, "cannot loop over " + type_name(v));
    return items_of(v, "for");
  }

  void bind(const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = v;
      return;
    }
    if (!v.is_list() || v.list().size() != targets.size())
      throw TemplateError(
          line, "cannot unpack " + type_name(v) + " into " + std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = v.list()[i];
  }

  void exec_for(const Node& node, std::string& out) {
    List items;
    for (const Value& item : iterate(eval(*node.expr), node.line)) {
      if (node.conditions.empty()) {
        items.push_back(item);
        continue;
      }
      scopes_.emplace_back();
      bind(node.targets, item, node.line);
      if (truthy(eval(*node.conditions[0]))) items.push_back(item);
      scopes_.pop_back();
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      scopes_.emplace_back();
      const auto at = [&](int64_t k) { return k >= 0 && k < n ? items[static_cast<size_t>(k)] : Value{}; };
      scopes_.back()["loop"] =
          Dict{{"index0", i},          {"index", i + 1},     {"revindex", n - i}, {"revindex0", n - i - 1},
               {"first", i == 0},      {"last", i == n - 1}, {"length", n},       {"previtem", at(i - 1)},
               {"nextitem", at(i + 1)}};
      bind(node.targets, items[static_cast<size_t>(i)], node.line);
      const Flow flow = exec(node.bodies[0], out);
      scopes_.pop_back();
      if (flow == Flow::break_loop) break;
    }
    if (n == 0 && node.bodies.size() > 1) exec(node.bodies[1], out);
  }

  void exec_set(const Node& node) {
    if (!node.bodies.empty()) {
      std::string captured;
      exec(node.bodies[0], captured);
      scopes_.back()[node.targets[0]] = captured;
      return;
    }
    const Value value = eval(*node.expr);
    if (node.attribute.empty()) return bind(node.targets, value, node.line);
    const Value target = lookup_name(node.targets[0]);
    if (!target.is_namespace())
      throw TemplateError(node.line, "cannot set attribute '" + node.attribute + "' of " + type_name(target) +
                                         " (only of a namespace())");
    Dict& attributes = target.ns().attributes;
    for (auto& [k, v] : attributes)
      if (k == node.attribute) return void(v = value);
    attributes.emplace_back(node.attribute, value);
  }

  Value lookup_name(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (const auto found = it->find(name); found != it->end()) return found->second;
    return {};
  }

 public:
  Value eval(const Expr& e) {
    try {
      return eval_inner(e);
    } catch (const ValueError& error) {
      throw TemplateError(e.line, error.what());
    }
  }

 private:
  Value eval_inner(const Expr& e) {
    const auto arg = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : Value{}; };
    switch (e.kind) {
      case Expr::Kind::literal:
        return e.literal;
      case Expr::Kind::name:
        return lookup_name(e.name);
      case Expr::Kind::attribute:
        return attribute(arg(0), e.name);
      case Expr::Kind::index:
        return index_value(arg(0), arg(1));
      case Expr::Kind::slice:
        return slice_value(arg(0), arg(1), arg(2), arg(3));
      case Expr::Kind::call:
        return call(e);
      case Expr::Kind::filter:
        return apply_filter(e.name, arg(0), arguments(e, 1), keywords(e));
      case Expr::Kind::test:
        return apply_test(e.name, arg(0), arguments(e, 1)) != e.negated;
      case Expr::Kind::unary:
        return unary_op(e.name, arg(0));
      case Expr::Kind::binary:
        return binary_op(e.name, arg(0), arg(1));
      case Expr::Kind::logical_and: {
        Value left = arg(0);
        return truthy(left) ? arg(1) : left;
      }
      case Expr::Kind::logical_or: {
        Value left = arg(0);
        return truthy(left) ? left : arg(1);
      }
      case Expr::Kind::logical_not:
        return !truthy(arg(0));
      case Expr::Kind::conditional:
        return truthy(arg(1)) ? arg(0) : arg(2);
      case Expr::Kind::list:
        return arguments(e, 0);
      case Expr::Kind::dict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = arg(i);
          if (!key.is_string()) throw ValueError("a dict key must be a string here, not " + type_name(key));
          d.emplace_back(key.str(), arg(i + 1));
        }
        return d;
      }
    }
    return {};
  }

  List arguments(const Expr& e, size_t from) {
    List out;
    for (size_t i = from; i < e.args.size(); ++i) out.push_back(eval(*e.args[i]));
    return out;
  }
  Kwargs keywords(const Expr& e) {
    Kwargs out;
    for (const auto& [k, v] : e.kwargs) out.emplace_back(k, eval(*v));
    return out;
  }

  // Jinja's getattr: a dict's key or a namespace's attribute; undefined when missing; an error on undefined.
  Value attribute(const Value& object, const std::string& name) {
    if (object.undefined()) throw ValueError("undefined has no attribute '" + name + "'");
    if (object.is_dict()) return lookup(object.dict(), name);
    if (object.is_namespace()) return lookup(object.ns().attributes, name);
    if (has_method(object, name)) throw ValueError("method '" + name + "' is only supported called");
    return {};
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::attribute) {
      const Value object = eval(*callee.args[0]);
      const Value member =
          object.is_dict() && !has_method(object, callee.name) ? lookup(object.dict(), callee.name) : Value{};
      if (member.is_macro()) return call_macro(member.macro(), e);
      if (object.undefined()) throw ValueError("undefined has no method '" + callee.name + "'");
      return call_method(object, callee.name, arguments(e, 1), keywords(e));
    }
    const Value function = callee.kind == Expr::Kind::name ? lookup_name(callee.name) : eval(callee);
    if (function.is_macro()) return call_macro(function.macro(), e);
    if (callee.kind != Expr::Kind::name) throw ValueError("cannot call " + type_name(function));
    return call_global(callee.name, arguments(e, 1), keywords(e), e.line);
  }

  Value call_global(const std::string& name, const List& args, const Kwargs& kwargs, int line) {
    if (name == "raise_exception") {
      throw TemplateError(line, "raise_exception: " + (args.empty() ? std::string() : to_str(args[0])));
    }
    if (name == "namespace") {
      auto ns = std::make_shared<Namespace>();
      for (const Value& a : args) {
        if (!a.is_dict())
          throw ValueError("namespace() takes keyword arguments or a dict, not " + type_name(a));
        ns->attributes.insert(ns->attributes.end(), a.dict().begin(), a.dict().end());
      }
      ns->attributes.insert(ns->attributes.end(), kwargs.begin(), kwargs.end());
      return Value(ns);
    }
    if (name == "range") {
      if (args.empty() || args.size() > 3 || !kwargs.empty())
        throw ValueError("range() takes 1 to 3 integers");
      for (const Value& a : args)
        if (!a.is_int()) throw ValueError("range() takes integers, not " + type_name(a));
      const int64_t start = args.size() > 1 ? args[0].integer() : 0;
      const int64_t stop = args.size() > 1 ? args[1].integer() : args[0].integer();
      const int64_t step = args.size() > 2 ? args[2].integer() : 1;
      if (step == 0) throw ValueError("range() step must not be zero");
      List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
      return out;
    }
    throw ValueError("function '" + name + "' is not supported");
  }

  Value call_macro(const Macro& macro, const Expr& e) {
    const Node& node = *macro.node;
    if (depth_ >= kMaxMacroDepth) throw ValueError("macro '" + node.text + "' nests deeper than 64 calls");
    if (e.args.size() - 1 > node.targets.size())
      throw ValueError("macro '" + node.text + "' takes " + std::to_string(node.targets.size()) +
                       " arguments");
    Scope params;
    for (size_t i = 0; i < node.targets.size(); ++i) {
      if (i + 1 < e.args.size()) params[node.targets[i]] = eval(*e.args[i + 1]);
    }
    for (const auto& [k, v] : e.kwargs) {
      if (std::find(node.targets.begin(), node.targets.end(), k) == node.targets.end())
        throw ValueError("macro '" + node.text + "' has no parameter '" + k + "'");
      params[k] = eval(*v);
    }
    std::vector<Scope> saved = {scopes_.front(), std::move(params)};
    std::swap(saved, scopes_);
    for (size_t i = 0; i < node.targets.size(); ++i)
      if (!scopes_.back().count(node.targets[i]) && node.defaults[i])
        scopes_.back()[node.targets[i]] = eval(*node.defaults[i]);
    std::string out;
    ++depth_;
    try {
      exec(node.bodies[0], out);
    } catch (...) {
      --depth_;
      std::swap(saved, scopes_);
      throw;
    }
    --depth_;
    std::swap(saved, scopes_);
    return out;
  }

  std::vector<Scope> scopes_;
  int depth_ = 0;
  const std::string* top_ = nullptr;  // the rendered text, which generation blocks mark
  std::vector<std::pair<size_t, size_t>> spans_;
};

}  // namespace

Template::Template(const std::string& source) {
  const std::vector<Token> tokens = tokenize(source);
  body_ = parse(tokens);
  for (size_t i = 0; i + 1 < tokens.size(); ++i)
    marks_generation_ =
        marks_generation_ || (tokens[i].kind == TokenKind::block_begin &&
                              tokens[i + 1].kind == TokenKind::name && tokens[i + 1].text == "generation");
}

std::string Template::render(const Dict& context,
                             std::vector<std::pair<size_t, size_t>>* generation_spans) const {
  Evaluator evaluator(context);
  std::string out;
  std::vector<std::pair<size_t, size_t>> spans;
  evaluator.render(body_, out, spans);
  if (generation_spans) *generation_spans = std::move(spans);
  return out;
}

}  // namespace mt::jinja
