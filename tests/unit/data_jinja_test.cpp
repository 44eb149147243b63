// The Jinja subset of src/data/jinja/: whitespace control, scoping, Python's semantics of the values, and the
// refusals by name and line. The real templates against python3-jinja2: tests/cli/test_chat_template.py.
#include <gtest/gtest.h>

#include "data/jinja/lexer.h"
#include "data/jinja/template.h"

namespace mt::jinja {
namespace {

std::string render(const std::string& source, const Dict& context = {}) {
  return Template(source).render(context);
}

// The TemplateError's line and message of parsing and rendering `source`.
std::pair<int, std::string> error_of(const std::string& source, const Dict& context = {}) {
  try {
    render(source, context);
  } catch (const TemplateError& e) {
    return {e.line, e.what()};
  }
  return {0, "no error"};
}

TEST(DataJinja, WhitespaceControlAsTransformersSetsIt) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it.
  EXPECT_EQ(render("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(render("x  {%- if true -%}  \n y {%- endif %}"), "xy");
  EXPECT_EQ(render("a {{- ' b ' -}} c"), "a b c");
  EXPECT_EQ(render("{# a comment #}\nx{#- another -#}  y"), "xy");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}\n"), "a\nb");  // {{ }} keeps its newline; one final newline goes
}

TEST(DataJinja, LoopsScopesAndNamespaces) {
  const Dict ctx = {{"xs", List{Value("a"), Value("b"), Value("c")}}};
  EXPECT_EQ(
      render("{% for x in xs %}{{ loop.index0 }}{{ x }}{{ loop.first }}{{ loop.last }}{{ loop.length }};"
             "{% endfor %}",
             ctx),
      "0aTrueFalse3;1bFalseFalse3;2cFalseTrue3;");
  EXPECT_EQ(
      render("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{% if loop.index > 2 %}{% break %}"
             "{% endif %}{{ x }}{% endfor %}",
             ctx),
      "a");
  // A set in a loop stays there; a namespace carries it out.
  EXPECT_EQ(render("{% set y = 1 %}{% set ns = namespace(n=0) %}{% for x in xs %}{% set y = 2 %}"
                   "{% set ns.n = ns.n + 1 %}{% endfor %}{{ y }}{{ ns.n }}",
                   ctx),
            "13");
  EXPECT_EQ(
      render(
          "{% for x in xs[::-1] %}{{ x }}{% else %}none{% endfor %}{% for x in [] %}{% else %}E{% endfor %}",
          ctx),
      "cbaE");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': [2]}.items() %}{{ k }}={{ v }} {% endfor %}"), "a=1 b=[2] ");
  EXPECT_EQ(render("{% macro greet(who, end='!') %}hi {{ who }}{{ end }}{% endmacro %}{{ greet('x') }}"
                   "{{ greet('y', end='?') }}"),
            "hi x!hi y?");
  EXPECT_EQ(render("{% set s %}in {{ 1 + 1 }}{% endset %}[{{ s }}]"), "[in 2]");
}

TEST(DataJinja, ValuesFollowPython) {
  EXPECT_EQ(render("{{ none }} {{ true }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.0 }} {{ "
                   "1e20 * 1 }}"),
            "None True 3 -4 3.5 1024 1.0 1e+20");
  EXPECT_EQ(render("{{ [1, 'a', none, {'k': \"it's\"}] }}"), "[1, 'a', None, {'k': \"it's\"}]");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [true, 'é\\n']} | tojson }}|{{ [1] | tojson(indent=2) }}"),
            "{\"b\": 1, \"a\": [true, \"é\\n\"]}|[\n  1\n]");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' x y '.split() }} {{ 'ab'.split('b')[0] }}"),
            "['a', 'b', '', 'c'] ['x', 'y'] a");
  EXPECT_EQ(
      render(
          "{{ '\\n\\nx\\n'.strip('\\n') }}|{{ '  x '.lstrip() }}|{{ 'xaa'.rstrip('a') }}|{{ ' t ' | trim }}"),
      "x|x |x|t");
  // Python's whitespace is Unicode's (ideographic space, NBSP); a split's rest keeps its trailing spaces.
  EXPECT_EQ(render("[{{ '\u3000x\u00a0\n' | trim }}]{{ ' a  b c '.split(none, 1) }}{{ 'a\u3000b'.split() }}"),
            "[x]['a', 'b c ']['a', 'b']");
  EXPECT_EQ(render("{{ 'héllo'[1] }}{{ 'héllo'[-1] }}{{ 'héllo'[1:3] }}{{ 'héllo' | length }}"), "éoél5");
  EXPECT_EQ(
      render("{{ 'x' in 'axb' }}{{ 2 not in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 1 == 1.0 }}{{ 'a' < 'b' }}"),
      "TrueFalseTrueTrueTrue");
  EXPECT_EQ(
      render("{{ 0 or 'y' }}{{ 'x' and '' }}|{{ 'a' ~ 1 ~ none }}|{{ 'n' if false }}|{{ x | default('d') }}"),
      "y|a1None||d");
  EXPECT_EQ(
      render("{{ d.get('a') }}{{ d.get('z', 5) }}{{ d.z is defined }}{{ d.a is string }}{{ d is mapping }}",
             {{"d", Dict{{"a", Value("A")}}}}),
      "A5FalseTrueTrue");
}

TEST(DataJinja, RefusesWhatItDoesNotImplementByNameAndLine) {
  EXPECT_EQ(error_of("\n\n{{ x | xmlattr }}"),
            std::pair(3, std::string("filter 'xmlattr' is not supported")));
  EXPECT_EQ(error_of("{% extends 'base' %}"),
            std::pair(1, std::string("statement 'extends' is not supported")));
  EXPECT_EQ(error_of("\n{{ x is sameas y }}"), std::pair(2, std::string("test 'sameas' is not supported")));
  EXPECT_EQ(error_of("\n{{ lipsum(2) }}"), std::pair(2, std::string("function 'lipsum' is not supported")));
  EXPECT_EQ(error_of("{{ [1].append(2) }}"),
            std::pair(1, std::string("method 'append' of a list is not supported")));
  EXPECT_EQ(error_of("{{ raise_exception('bad ' ~ 1) }}"),
            std::pair(1, std::string("raise_exception: bad 1")));
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"),
            std::pair(1, std::string("unsupported operand types for +: a string and an int")));
  EXPECT_EQ(error_of("{{ x.y.z }}"), std::pair(1, std::string("undefined has no attribute 'y'")));
  EXPECT_EQ(error_of("{% if x %}\n{% endfor %}").first, 2);
  EXPECT_EQ(error_of("{{ 'open }}").second, "a string literal is never closed");
  EXPECT_EQ(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").second,
            "nested deeper than 200 levels");
  EXPECT_EQ(error_of("{{ " + std::string(5000, '-') + "1 }}").second, "nested deeper than 200 levels");
  EXPECT_EQ(error_of([] {
              std::string deep;
              for (int i = 0; i < 300; ++i) deep += "{% if true %}";
              return deep;
            }())
                .second,
            "nested deeper than 200 levels");
  EXPECT_EQ(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").second,
            "macro 'f' nests deeper than 64 calls");
}

TEST(DataJinja, GenerationBlocksMarkTheirText) {
  const Template t(
      "{% for m in xs %}<{{ m }}>{% generation %}{{ m | upper }}.{% endgeneration %}\n{% endfor %}");
  EXPECT_TRUE(t.marks_generation());
  std::vector<std::pair<size_t, size_t>> spans;
  EXPECT_EQ(t.render({{"xs", List{Value("a"), Value("bc")}}}, &spans),
            "<a>A.<bc>BC.");  // trim_blocks: no newline after a block tag
  EXPECT_EQ(spans, (std::vector<std::pair<size_t, size_t>>{{3, 5}, {9, 12}}));
  EXPECT_FALSE(Template("{{ generation }}").marks_generation());
  EXPECT_EQ(error_of("{% set s %}\n{% generation %}x{% endgeneration %}{% endset %}"),
            std::pair(2, std::string("a generation block inside a set block or a macro is not supported")));
}

TEST(DataJinja, LexerNumbersItsLines) {
  const std::vector<Token> tokens = tokenize("a\n{{ x }}\r\n{% if y %}");
  ASSERT_GE(tokens.size(), 4u);
  EXPECT_EQ(tokens[1].kind, TokenKind::var_begin);
  EXPECT_EQ(tokens[2].text, "x");
  EXPECT_EQ(tokens[2].line, 2);
  EXPECT_EQ(tokens.back().line, 3);
}

}  // namespace
}  // namespace mt::jinja
