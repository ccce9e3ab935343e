// Evaluation: Python's printing, arithmetic and comparisons, Undefined, loops, namespaces,
// macros, and how failures are reported. Expected strings are what jinja2 3.1 renders.
#include <gtest/gtest.h>

#include <thread>

#include "chat/jinja_error.h"
#include "chat/jinja_strings.h"
#include "jinja_test_util.h"

namespace fp4::chat::jinja {
namespace {

using test_util::error_of;
using test_util::render;

TEST(JinjaEval, PrintsValuesAsPythonStr) {
  const nlohmann::ordered_json vars = {
      {"d", {{"b", 1}, {"a", {true, nullptr, 1.5, "it's"}}}}, {"s", "x\"y'z"}, {"e", ""}};
  EXPECT_EQ(render("{{ 1 }} {{ 1.0 }} {{ true }} {{ none }} {{ [] }} {{ {} }}|{{ e }}|{{ missing }}|", vars),
            "1 1.0 True None [] {}|||");
  EXPECT_EQ(render("{{ d }}", vars), "{'b': 1, 'a': [True, None, 1.5, \"it's\"]}");
  EXPECT_EQ(render("{{ [s, 'a\\nb', '\\x01'] }}", vars), "['x\"y\\'z', 'a\\nb', '\\x01']");
  EXPECT_EQ(render("{{ d.keys() }} {{ d.items()|list }}", vars),
            "dict_keys(['b', 'a']) [('b', 1), ('a', [True, None, 1.5, \"it's\"])]");
}

TEST(JinjaEval, FloatReprIsPythons) {
  // repr(float) in CPython: shortest round-trip digits, exponent outside [1e-4, 1e16).
  const std::pair<double, const char*> cases[] = {
      {0.1, "0.1"},        {1.0 / 3, "0.3333333333333333"}, {1e16, "1e+16"},      {1e15, "1000000000000000.0"},
      {1e-5, "1e-05"},     {0.0001, "0.0001"},              {-0.0, "-0.0"},        {123456789.123, "123456789.123"},
      {2.5e-300, "2.5e-300"}, {1.7976931348623157e308, "1.7976931348623157e+308"}, {5e-324, "5e-324"},
      {0.1 + 0.2, "0.30000000000000004"}, {100.0, "100.0"}, {1.5e16, "1.5e+16"}};
  for (const auto& [v, text] : cases) EXPECT_EQ(py_float_repr(v), text) << v;
}

TEST(JinjaEval, ArithmeticIsPythons) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }}"), "3 -4 -2 2 3.5 2.0");
  EXPECT_EQ(render("{{ -7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** -1 }} {{ 2 ** 62 }} {{ true + true }}"),
            "-4.0 0.5 0.5 4611686018427387904 2");
  // A zero float remainder takes the divisor's sign, as in Python.
  EXPECT_EQ(render("{{ 2.0 % -1 }} {{ -2.0 % 1 }} {{ 6.0 % -3 }} {{ 4.0 % 2.0 }}"), "-0.0 0.0 -0.0 0.0");
  EXPECT_EQ(render("{{ 'ab' * 2 }}{{ 2 * 'c' }}{{ 'x' * -1 }} {{ [1] + [2] }} {{ [0] * 3 }}"), "ababcc [1, 2] [0, 0, 0]");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ missing }}"), "a1NoneTrue1.5");
  // Python's ints are unbounded; ours are 64-bit and say so rather than wrap.
  EXPECT_NE(error_of("{{ 2 ** 64 }}").find("integer overflow in '**'"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow in '+'"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("can only concatenate str (not \"int\") to str"), std::string::npos);
}

TEST(JinjaEval, ComparisonsAndMembership) {
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' == 'a' }} {{ [1, 'x'] == [1, 'x'] }} {{ (1,) == [1] }}"),
            "True True True True False");
  EXPECT_EQ(render("{{ 'é' > 'z' }} {{ [1, 2] < [1, 3] }} {{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ 'k' in {'k': 0} }}"),
            "True True True True True");
  EXPECT_NE(error_of("{{ 1 < 'a' }}").find("'<' not supported between instances of 'int' and 'str'"), std::string::npos);
  EXPECT_NE(error_of("{{ [1] in {'a': 1} }}").find("unhashable type: 'list'"), std::string::npos);
}

TEST(JinjaEval, UndefinedBehavesAsJinjasDefault) {
  EXPECT_EQ(render("[{{ x }}] {{ x is defined }} {{ not x }} {{ x|length }} {{ x == y }} {{ 'a' in x }} "
                   "{% for i in x %}never{% endfor %}{{ x|default('d') }}"),
            "[] False True 0 True False d");
  EXPECT_EQ(render("{{ d.missing }}|{{ d['missing'] }}|{{ l[9] }}|{{ (d.missing is defined) }}",
                   {{"d", nlohmann::ordered_json::object()}, {"l", {1}}}),
            "|||False");
  EXPECT_EQ(error_of("{{ x.attr }}"), "chat template error at line 1, column 5: 'x' is undefined");
  EXPECT_EQ(error_of("\n  {{ d.a.b }}", {{"d", nlohmann::ordered_json::object()}}),
            "chat template error at line 2, column 9: 'dict object' has no attribute 'a'");
  EXPECT_EQ(error_of("{{ x + 1 }}"), "chat template error at line 1, column 6: 'x' is undefined");
  EXPECT_EQ(error_of("{{ nope() }}"), "chat template error at line 1, column 8: 'nope' is undefined");
}

TEST(JinjaEval, LoopVariables) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first|int }}{{ loop.last|int }}{{ loop.length }} {% endfor %}"),
            "1032103 2121003 3210013 ");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.previtem }}>{{ loop.nextitem }} {{ loop.cycle('a', 'b') }};{% endfor %}"),
            ">2 a;1>3 b;2> a;");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x is odd %}{% continue %}{% endif %}{% if x > 6 %}{% break %}"
                   "{% endif %}{{ x }}{% endfor %}"),
            "0246");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  EXPECT_NE(error_of("{% for a, b in [[1, 2, 3]] %}{% endfor %}").find("too many values to unpack (expected 2, got 3)"),
            std::string::npos);
  EXPECT_NE(error_of("{% for x in none %}{% endfor %}").find("'NoneType' object is not iterable"), std::string::npos);
}

TEST(JinjaEval, NamespacesCarryStateOutOfLoops) {
  EXPECT_EQ(render("{% set ns = namespace(n=0, seen=[]) %}{% for x in [3, 4] %}{% set ns.n = ns.n + x %}"
                   "{% set ns.seen = ns.seen + [x] %}{% endfor %}{{ ns.n }} {{ ns.seen }}"),
            "7 [3, 4]");
  EXPECT_EQ(render("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}[{{ ns.c }}]"), "12[]");
  EXPECT_NE(error_of("{% set n = 1 %}{% set n.x = 2 %}").find("cannot assign attribute on non-namespace object"),
            std::string::npos);
  EXPECT_NE(error_of("{{ namespace(_private=1) }}").find("underscore-prefixed"), std::string::npos);
}

TEST(JinjaEval, Macros) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bo', '?') }} {{ greet(punct='.', name='Cy') }} [{{ greet() }}]"),
            "Hi Ann! Hi Bo? Hi Cy. [Hi !]");
  EXPECT_EQ(render("{% macro f(k) %}{% if k <= 1 %}1{% else %}{{ k * (f(k - 1)|int) }}{% endif %}{% endmacro %}{{ f(5) }}"),
            "120");
  EXPECT_NE(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").find("macro 'm' takes not more than 1 argument(s)"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}").find("macro calls nested deeper than 100"),
            std::string::npos);
}

TEST(JinjaEval, RaiseExceptionCarriesTheTemplatesMessage) {
  try {
    render("ok{{ raise_exception('Roles must alternate: ' ~ 3) }}");
    FAIL() << "no exception";
  } catch (const TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "Roles must alternate: 3");
  }
  // It is an fp4::Error like every other template failure.
  EXPECT_EQ(error_of("{{ raise_exception('x') }}"), "x");
}

TEST(JinjaEval, GlobalsFromTransformers) {
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d') is string }} {{ range(3)|list }} {{ range(1, 7, 2)|list }}"),
            "True [0, 1, 2] [1, 3, 5]");
  EXPECT_NE(error_of("{{ range(100001)|length }}").find("range too big"), std::string::npos);
  EXPECT_EQ(render("{{ dict(a=1) }} {{ dict([['b', 2]]) }}"), "{'a': 1} {'b': 2}");
}

TEST(JinjaEval, StrftimeNowUsesTheInjectedClock) {
  setenv("TZ", "UTC", 1);
  tzset();
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y, %A %H:%M') }}"), "10 Jun 2024, Monday 06:13");
}

TEST(JinjaEval, ErrorsInsideMacrosPointInsideThem) {
  EXPECT_EQ(error_of("{% macro m() %}\n\n   {{ 1 // 0 }}{% endmacro %}{{ m() }}"),
            "chat template error at line 3, column 9: division by zero");
}

TEST(JinjaEval, ConcurrentRendersOfOneTemplate) {
  const Template t = parse_template("{% for i in range(n) %}{{ i }},{% endfor %}");
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      DictData globals = transformers_globals(std::chrono::system_clock::now());
      globals.set("n", Value(k));
      for (int rep = 0; rep < 200; ++rep) results[k] = jinja::render(t, globals);
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) {
    std::string expected;
    for (int i = 0; i < k; ++i) expected += std::to_string(i) + ",";
    EXPECT_EQ(results[k], expected);
  }
}

}  // namespace
}  // namespace fp4::chat::jinja
