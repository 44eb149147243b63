// A recursive-descent parser with Jinja's precedence: conditional, or, and, not, comparisons (in, not in),
// + and -, ~, * / // %, **, unary - and +, then a primary with its postfixes (. [] ()), filters and tests.
#include "data/jinja/parser.h"

#include <set>
#include <stdexcept>

#include "data/jinja/builtins.h"

namespace mt::jinja {
namespace {

const std::set<std::string> kUnsupportedStatements = {"block", "extends",    "include", "import",
                                                      "from",  "call",       "filter",  "with",
                                                      "raw",   "autoescape", "do",      "trans"};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    Body body = parse_body({});
    if (peek().kind != TokenKind::end) fail("'" + block_keyword() + "' without its opening statement");
    return body;
  }

 private:
  // Recursion is bounded: a template nesting deeper is refused rather than the stack exhausted.
  static constexpr int kMaxNesting = 200;
  struct Nesting {
    explicit Nesting(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting)
        throw TemplateError(parser.peek().line,
                            "nested deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    ~Nesting() { --parser.depth_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
    Parser& parser;
  };

  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& take() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  [[noreturn]] void fail(const std::string& what) const { throw TemplateError(peek().line, what); }

  bool at_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::op && peek(ahead).text == op;
  }
  bool at_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::name && peek(ahead).text == name;
  }
  bool skip_op(const char* op) {
    if (!at_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* name) {
    if (!at_name(name)) return false;
    ++i_;
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', found " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::name) fail("expected a name, found " + describe(peek()));
    return take().text;
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::block_end)
      fail("expected the end of the statement %}, found " + describe(peek()));
    ++i_;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::end:
        return "the end of the template";
      case TokenKind::block_end:
        return "%}";
      case TokenKind::var_end:
        return "}}";
      case TokenKind::text:
        return "text";
      default:
        return "'" + t.text + "'";
    }
  }
  // The keyword of the statement at a block_begin (empty when none).
  std::string block_keyword() const { return peek(1).kind == TokenKind::name ? peek(1).text : ""; }

  // Statements until one of `enders` (left unconsumed, at its block_begin) or the end.
  Body parse_body(const std::set<std::string>& enders) {
    Body body;
    while (peek().kind != TokenKind::end) {
      const Token& tok = peek();
      if (tok.kind == TokenKind::text) {
        body.push_back(make_node(Node::Kind::text, tok.line));
        body.back()->text = take().text;
      } else if (tok.kind == TokenKind::var_begin) {
        ++i_;
        auto node = make_node(Node::Kind::output, tok.line);
        node->expr = parse_expression();
        if (peek().kind != TokenKind::var_end) fail("expected }}, found " + describe(peek()));
        ++i_;
        body.push_back(std::move(node));
      } else {
        const std::string keyword = block_keyword();
        if (enders.count(keyword)) return body;
        body.push_back(parse_statement());
      }
    }
    for (const std::string& ender : enders)
      if (ender.starts_with("end")) fail("the template ends inside a block: expected {% " + ender + " %}");
    return body;
  }

  static NodePtr make_node(Node::Kind kind, int line) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->line = line;
    return node;
  }

  NodePtr parse_statement() {
    const Nesting nesting(*this);
    ++i_;  // block_begin
    const int line = peek().line;
    const std::string keyword = peek().kind == TokenKind::name ? take().text : "";
    if (keyword == "if") return parse_if(line);
    if (keyword == "for") return parse_for(line);
    if (keyword == "set") return parse_set(line);
    if (keyword == "macro") return parse_macro(line);
    if (keyword == "generation") {
      auto node = make_node(Node::Kind::generation, line);
      expect_block_end();
      node->bodies.push_back(parse_body({"endgeneration"}));
      end_block("endgeneration");
      return node;
    }
    if (keyword == "break" || keyword == "continue") {
      expect_block_end();
      return make_node(keyword == "break" ? Node::Kind::break_ : Node::Kind::continue_, line);
    }
    if (kUnsupportedStatements.count(keyword))
      throw TemplateError(line, "statement '" + keyword + "' is not supported");
    if (keyword.empty()) throw TemplateError(line, "expected a statement after {%");
    throw TemplateError(line, "unknown statement '" + keyword + "' (or one without its opening statement)");
  }

  // Consumes `{% keyword %}`.
  void end_block(const char* keyword) {
    ++i_;
    if (!skip_name(keyword)) fail(std::string("expected ") + keyword);
    expect_block_end();
  }

  NodePtr parse_if(int line) {
    auto node = make_node(Node::Kind::if_, line);
    node->conditions.push_back(parse_expression());
    expect_block_end();
    while (true) {
      node->bodies.push_back(parse_body({"elif", "else", "endif"}));
      const std::string keyword = block_keyword();
      i_ += 2;  // {% keyword
      if (keyword == "elif") {
        node->conditions.push_back(parse_expression());
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (keyword == "else") {
        node->bodies.push_back(parse_body({"endif"}));
        end_block("endif");
      }
      return node;
    }
  }

  NodePtr parse_for(int line) {
    auto node = make_node(Node::Kind::for_, line);
    do node->targets.push_back(expect_name());
    while (skip_op(","));
    if (!skip_name("in")) fail("expected 'in' in the for statement");
    node->expr = parse_ternary_free();
    if (skip_name("if")) node->conditions.push_back(parse_ternary_free());
    if (at_name("recursive")) fail("'for ... recursive' is not supported");
    expect_block_end();
    node->bodies.push_back(parse_body({"else", "endfor"}));
    if (block_keyword() == "else") {
      end_block("else");
      node->bodies.push_back(parse_body({"endfor"}));
    }
    end_block("endfor");
    return node;
  }

  NodePtr parse_set(int line) {
    auto node = make_node(Node::Kind::set, line);
    node->targets.push_back(expect_name());
    if (skip_op(".")) {
      node->attribute = expect_name();
    } else {
      while (skip_op(",")) node->targets.push_back(expect_name());
    }
    if (peek().kind == TokenKind::block_end && node->targets.size() == 1 && node->attribute.empty()) {
      expect_block_end();
      node->bodies.push_back(parse_body({"endset"}));
      end_block("endset");
      return node;
    }
    expect_op("=");
    node->expr = parse_expression();
    expect_block_end();
    return node;
  }

  NodePtr parse_macro(int line) {
    auto node = make_node(Node::Kind::macro, line);
    node->text = expect_name();
    expect_op("(");
    while (!skip_op(")")) {
      if (!node->targets.empty()) expect_op(",");
      node->targets.push_back(expect_name());
      node->defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
    }
    expect_block_end();
    node->bodies.push_back(parse_body({"endmacro"}));
    end_block("endmacro");
    return node;
  }

  ExprPtr make(Expr::Kind kind, int line, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    e->name = std::move(name);
    return e;
  }
  ExprPtr make2(Expr::Kind kind, int line, std::string name, ExprPtr a, ExprPtr b) {
    auto e = make(kind, line, std::move(name));
    e->args.push_back(std::move(a));
    if (b) e->args.push_back(std::move(b));
    return e;
  }

 public:
  ExprPtr parse_expression() {
    const Nesting nesting(*this);
    ExprPtr value = parse_or();
    while (at_name("if")) {
      const int line = take().line;
      ExprPtr condition = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression() : nullptr;
      auto e = make2(Expr::Kind::conditional, line, "", std::move(value), std::move(condition));
      e->args.push_back(std::move(otherwise));
      value = std::move(e);
    }
    return value;
  }

 private:
  // A for's iterable and condition: no conditional expression, whose `if` would be the loop's.
  ExprPtr parse_ternary_free() { return parse_or(); }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const int line = take().line;
      left = make2(Expr::Kind::logical_or, line, "", std::move(left), parse_and());
    }
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const int line = take().line;
      left = make2(Expr::Kind::logical_and, line, "", std::move(left), parse_not());
    }
    return left;
  }
  ExprPtr parse_not() {
    const Nesting nesting(*this);
    if (at_name("not")) {
      const int line = take().line;
      return make2(Expr::Kind::logical_not, line, "", parse_not(), nullptr);
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      const int line = peek().line;
      std::string op;
      for (const char* o : {"==", "!=", "<", ">", "<=", ">="})
        if (at_op(o)) op = o;
      if (!op.empty()) {
        ++i_;
      } else if (at_name("in")) {
        ++i_;
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        i_ += 2;
        op = "not in";
      } else {
        return left;
      }
      left = make2(Expr::Kind::binary, line, op, std::move(left), parse_math1());
    }
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& op = take();
      left = make2(Expr::Kind::binary, op.line, op.text, std::move(left), parse_concat());
    }
    return left;
  }
  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (at_op("~")) {
      const int line = take().line;
      left = make2(Expr::Kind::binary, line, "~", std::move(left), parse_math2());
    }
    return left;
  }
  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& op = take();
      left = make2(Expr::Kind::binary, op.line, op.text, std::move(left), parse_pow());
    }
    return left;
  }
  ExprPtr parse_pow() {
    ExprPtr left = parse_unary();
    while (at_op("**")) {
      const int line = take().line;
      left = make2(Expr::Kind::binary, line, "**", std::move(left), parse_unary());
    }
    return left;
  }
  // Unary - and + bind tighter than filters, as in Jinja: -3 | abs is 3.
  ExprPtr parse_unary(bool with_filters = true) {
    const Nesting nesting(*this);
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      const Token& op = take();
      node = make2(Expr::Kind::unary, op.line, op.text, parse_unary(false), nullptr);
    } else {
      node = parse_postfix(parse_primary());
    }
    return with_filters ? parse_filters(std::move(node)) : std::move(node);
  }

  ExprPtr parse_primary() {
    const Token& tok = take();
    const int line = tok.line;
    auto literal = [&](Value v) {
      auto e = make(Expr::Kind::literal, line);
      e->literal = std::move(v);
      return e;
    };
    switch (tok.kind) {
      case TokenKind::string: {
        std::string text = tok.text;
        while (peek().kind == TokenKind::string) text += take().text;  // adjacent literals join
        return literal(text);
      }
      case TokenKind::integer:
        try {
          return literal(static_cast<int64_t>(std::stoll(tok.text)));
        } catch (const std::out_of_range&) {
          throw TemplateError(line, "integer " + tok.text + " is out of range (64 bits)");
        }
      case TokenKind::floating:
        try {
          return literal(std::stod(tok.text));
        } catch (const std::out_of_range&) {
          throw TemplateError(line, "float " + tok.text + " is out of range");
        }
      case TokenKind::name:
        if (tok.text == "true" || tok.text == "True") return literal(true);
        if (tok.text == "false" || tok.text == "False") return literal(false);
        if (tok.text == "none" || tok.text == "None") return literal(None{});
        return make(Expr::Kind::name, line, tok.text);
      case TokenKind::op:
        if (tok.text == "(") return parse_parenthesized(line);
        if (tok.text == "[") return parse_sequence(Expr::Kind::list, "]", line);
        if (tok.text == "{") return parse_dict(line);
        break;
      default:
        break;
    }
    throw TemplateError(line, "unexpected " + describe(tok) + " in an expression");
  }

  // (x) or a tuple (x, y), which is a list here.
  ExprPtr parse_parenthesized(int line) {
    if (skip_op(")")) return make(Expr::Kind::list, line);
    ExprPtr first = parse_expression();
    if (skip_op(")")) return first;
    auto e = make(Expr::Kind::list, line);
    e->args.push_back(std::move(first));
    while (skip_op(",") && !at_op(")")) e->args.push_back(parse_expression());
    expect_op(")");
    return e;
  }
  ExprPtr parse_sequence(Expr::Kind kind, const char* close, int line) {
    auto e = make(kind, line);
    while (!skip_op(close)) {
      if (!e->args.empty()) expect_op(",");
      if (skip_op(close)) break;
      e->args.push_back(parse_expression());
    }
    return e;
  }
  ExprPtr parse_dict(int line) {
    auto e = make(Expr::Kind::dict, line);
    while (!skip_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (skip_op("}")) break;
      e->args.push_back(parse_expression());
      expect_op(":");
      e->args.push_back(parse_expression());
    }
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (skip_op(".")) {
        auto a = make(Expr::Kind::attribute, line,
                      peek().kind == TokenKind::integer ? take().text : expect_name());
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (skip_op("[")) {
        e = parse_subscript(std::move(e), line);
      } else if (skip_op("(")) {
        auto call = make(Expr::Kind::call, line);
        call->args.push_back(std::move(e));
        parse_arguments(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, int line) {
    ExprPtr parts[3];
    int colons = 0;
    if (!at_op(":")) parts[0] = parse_expression();
    while (colons < 2 && skip_op(":")) {
      ++colons;
      if (!at_op(":") && !at_op("]")) parts[colons] = parse_expression();
    }
    expect_op("]");
    if (colons == 0) return make2(Expr::Kind::index, line, "", std::move(object), std::move(parts[0]));
    auto e = make(Expr::Kind::slice, line);
    e->args.push_back(std::move(object));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // After "(": positional arguments, then name=value ones, to ")".
  void parse_arguments(Expr& call) {
    while (!skip_op(")")) {
      if (call.args.size() > 1 || !call.kwargs.empty()) expect_op(",");
      if (skip_op(")")) break;
      if (peek().kind == TokenKind::name && at_op("=", 1)) {
        std::string key = take().text;
        ++i_;
        call.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.kwargs.empty()) fail("a positional argument after a keyword argument");
        call.args.push_back(parse_expression());
      }
    }
  }

  // Whether a test's argument without parentheses follows, as Jinja reads it.
  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.kind == TokenKind::name)
      return t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if";
    return t.kind == TokenKind::string || t.kind == TokenKind::integer || t.kind == TokenKind::floating ||
           at_op("[") || at_op("{");
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (skip_op("|")) {
        const std::string name = expect_name();
        if (!has_filter(name)) throw TemplateError(line, "filter '" + name + "' is not supported");
        auto f = make(Expr::Kind::filter, line, name);
        f->args.push_back(std::move(e));
        if (skip_op("(")) parse_arguments(*f);
        e = std::move(f);
      } else if (skip_name("is")) {
        const bool negated = skip_name("not");
        const std::string name = expect_name();
        if (!has_test(name)) throw TemplateError(line, "test '" + name + "' is not supported");
        auto t = make(Expr::Kind::test, line, name);
        t->negated = negated;
        t->args.push_back(std::move(e));
        if (skip_op("(")) {
          parse_arguments(*t);
        } else if (starts_test_argument()) {  // `x is divisibleby 3`, `x is in 'cat'`: one argument
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  return Parser(tokens).parse_template();
}

}  // namespace mt::jinja
