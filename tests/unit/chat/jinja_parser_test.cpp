// The parser: Jinja's precedence and grammar corners, syntax errors with their positions, and
// the per-frame symbol analysis that decides how each frame binds its variables. Expected
// renderings are jinja2 3.1's.
#include <gtest/gtest.h>

#include "chat/jinja_parser.h"
#include "jinja_test_util.h"

namespace fp4::chat::jinja {
namespace {

using test_util::error_of;
using test_util::render;

TEST(JinjaParser, Precedence) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 - 4 / 2 }}"), "5.0");
  EXPECT_EQ(render("{{ 2 ** 3 ** 2 }}"), "64");  // Jinja's ** is left-associative, unlike Python's
  EXPECT_EQ(render("{{ -2 ** 2 }}"), "4");       // unary minus binds tighter than **
  EXPECT_EQ(render("{{ -3|abs }}"), "3");        // ... and a filter applies to -3
  EXPECT_EQ(render("{{ 'a' ~ 1 * 2 }}"), "a2");  // * before ~
  EXPECT_NE(error_of("{{ 'a' ~ 1 + 2 }}").find("can only concatenate str"), std::string::npos);  // ~ before +
  EXPECT_EQ(render("{{ not 1 == 2 }}"), "True");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"), "True False");
  EXPECT_EQ(render("{{ l|length - 1 }}", {{"l", {1, 2, 3}}}), "2");
  EXPECT_EQ(render("{{ 'x' if false }}|{{ 1 if 0 else 2 if 1 else 3 }}"), "|2");
  EXPECT_EQ(render("{{ a or b and c }}", {{"a", 0}, {"b", 5}, {"c", 6}}), "6");
}

TEST(JinjaParser, TestsTakeOneBareArgument) {
  EXPECT_EQ(render("{{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is not none }}"), "True False True");
  EXPECT_EQ(render("{{ x is eq 1 and true }}", {{"x", 1}}), "True");
  EXPECT_EQ(render("{{ 'yes' if x is defined else 'no' }}"), "no");
}

TEST(JinjaParser, SubscriptsAndCalls) {
  const nlohmann::ordered_json vars = {{"l", {1, 2, 3, 4}}, {"d", {{"k", {{"x", "y"}}}}}};
  EXPECT_EQ(render("{{ l[1:3] }} {{ l[::2] }} {{ l[:-1] }} {{ l[-1] }} {{ l.0 }}", vars), "[2, 3] [1, 3] [1, 2, 3] 4 1");
  EXPECT_EQ(render("{{ d.k.x }} {{ d['k']['x'] }} {{ d.get('k').get('x') }}", vars), "y y y");
  EXPECT_EQ(render("{{ dict(a=1, b=[2,]) }}"), "{'a': 1, 'b': [2]}");
  EXPECT_EQ(render("{{ (1,) }} {{ () }} {{ (1, 2) }}"), "(1,) () (1, 2)");
}

TEST(JinjaParser, StatementForms) {
  EXPECT_EQ(render("{% for a, b in [[1, 2], [3, 4]] %}{{ a * b }},{% endfor %}"), "2,12,");
  EXPECT_EQ(render("{% for (a, b) in [[1, 2]] %}{{ a + b }}{% endfor %}"), "3");
  EXPECT_EQ(render("{% for x in [1, 2, 3] if x != 2 %}{{ x }}{% else %}none{% endfor %}"), "13");
  EXPECT_EQ(render("{% if false %}a{% elif 0 %}b{% elif 1 %}c{% else %}d{% endif %}"), "c");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set x | upper %}hi{% endset %}{{ x }}"), "HI");
  EXPECT_EQ(render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}"), "3");
  EXPECT_EQ(render("{% filter trim|upper %}  a  {% endfilter %}"), "A");
  EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(b=4, a=3) }}"), "1234");
}

TEST(JinjaParser, SyntaxErrorsSayWhere) {
  EXPECT_EQ(error_of("{% if %}"), "chat template syntax error at line 1, column 7: expected an expression, got '%}'");
  EXPECT_EQ(error_of("ok\n{% for x in l %}\nnever closed"),
            "chat template syntax error at line 3, column 13: unexpected end of template, expected 'endfor' or 'else'");
  EXPECT_EQ(error_of("{% endif %}"), "chat template syntax error at line 1, column 4: unexpected 'endif'");
  EXPECT_EQ(error_of("{% frobnicate %}"), "chat template syntax error at line 1, column 4: unknown tag 'frobnicate'");
  EXPECT_EQ(error_of("{% include 'x.jinja' %}"),
            "chat template syntax error at line 1, column 4: tag 'include' is not supported in chat templates");
  EXPECT_EQ(error_of("{{ 1 + }}"), "chat template syntax error at line 1, column 8: unexpected '}}'");
  EXPECT_EQ(error_of("{% break %}"), "chat template syntax error at line 1, column 4: 'break' outside of a for loop");
  EXPECT_EQ(error_of("{% macro m(a=1, b) %}{% endmacro %}"),
            "chat template syntax error at line 1, column 18: non-default argument follows default argument");
}

TEST(JinjaParser, UnknownFiltersAndTestsFailAtParseTime) {
  EXPECT_EQ(error_of("{{ x|frobnicate }}"), "chat template syntax error at line 1, column 6: no filter named 'frobnicate'");
  EXPECT_EQ(error_of("{{ x is frobnicated }}"), "chat template syntax error at line 1, column 9: no test named 'frobnicated'");
  // ... except inside an if or a conditional expression, where Jinja 3 defers the check to the
  // moment the code runs; a loop or macro inside the if is checked again.
  EXPECT_EQ(render("{% if false %}{{ x|frobnicate }}{% endif %}{{ 1 if true else x is frobnicated }}"), "1");
  EXPECT_EQ(error_of("{% if true %}{{ x|frobnicate }}{% endif %}"),
            "chat template error at line 1, column 19: no filter named 'frobnicate'");
  EXPECT_EQ(error_of("{% if false %}{% for i in l %}{{ i|frobnicate }}{% endfor %}{% endif %}"),
            "chat template syntax error at line 1, column 36: no filter named 'frobnicate'");
  // Filters Jinja has but fp4serve lacks fail only when used.
  EXPECT_EQ(render("{% if false %}{{ x|wordwrap }}{% endif %}ok"), "ok");
  EXPECT_EQ(error_of("{{ 'a b'|wordwrap }}"),
            "chat template error at line 1, column 10: filter 'wordwrap' is not supported in chat templates");
}

TEST(JinjaParser, DeepNestingIsRefused) {
  const std::string deep = "{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}";
  EXPECT_NE(error_of(deep).find("expression nested too deeply"), std::string::npos);
}

LoadKind kind_of(const FrameSymbols& f, const std::string& name) {
  for (const auto& [n, k] : f.loads) {
    if (n == name) return k;
  }
  ADD_FAILURE() << "no symbol " << name;
  return LoadKind::Param;
}

TEST(JinjaSymbols, FrameLoadRules) {
  // Read before assigned: resolved from the context. Assigned first: starts undefined.
  Template t = parse_template("{{ a }}{% set a = 1 %}{% set b = 2 %}{{ b }}");
  EXPECT_EQ(kind_of(t.frame, "a"), LoadKind::Resolve);
  EXPECT_EQ(kind_of(t.frame, "b"), LoadKind::Undefined);
  // Assigned only inside an if: resolved, since the branch may not run.
  t = parse_template("{% if c %}{% set d = 1 %}{% endif %}{{ d }}");
  EXPECT_EQ(kind_of(t.frame, "d"), LoadKind::Resolve);
  // A loop body assigning a name of the enclosing frame copies it in on each iteration; the loop
  // variables and `loop` are parameters.
  t = parse_template("{% set x = 1 %}{% for i in l %}{% set x = 2 %}{% endfor %}");
  const Stmt& loop = *t.body[1];
  EXPECT_EQ(kind_of(loop.frame, "x"), LoadKind::Alias);
  EXPECT_EQ(kind_of(loop.frame, "i"), LoadKind::Param);
  EXPECT_EQ(kind_of(loop.frame, "loop"), LoadKind::Param);
  // A read in a loop of a name the template assigns later binds to the template's own variable.
  t = parse_template("{% for i in l %}{{ z }}{% endfor %}{% set z = 1 %}");
  EXPECT_EQ(kind_of(t.frame, "z"), LoadKind::Undefined);
  for (const auto& [name, kind] : t.body[0]->frame.loads) EXPECT_NE(name, "z");
}

TEST(JinjaSymbols, ScopingMatchesJinja) {
  const nlohmann::ordered_json z = {{"z", "Z"}};
  EXPECT_EQ(render("{{ z }}{% set z = 1 %}{{ z }}", z), "Z1");
  EXPECT_EQ(render("{% for i in [1, 2] %}{{ z }}{% endfor %}{% set z = 1 %}", z), "");
  EXPECT_EQ(render("{% if false %}{% set z = 1 %}{% endif %}{{ z }}", z), "Z");
  EXPECT_EQ(render("{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = i + 10 %}{{ x }},{% endfor %}{{ x }}"),
            "110,111,112,1");
  EXPECT_EQ(render("{% for i in range(3) %}{{ y|default('u') }}{% set y = i %}{% endfor %}{{ y }}"), "uuu");
  EXPECT_EQ(render("{% macro m() %}{{ w }}{% endmacro %}{% set w = 5 %}{{ m() }}"), "5");
  EXPECT_EQ(render("{% for i in range(2) %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}"), "01");
  EXPECT_EQ(render("{% with p = 5 %}{% set q = p %}{% endwith %}[{{ p }}{{ q }}]"), "[]");
}

}  // namespace
}  // namespace fp4::chat::jinja
