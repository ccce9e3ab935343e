// Filters, tests, str/dict methods, tojson and %-formatting, against what jinja2 3.1 with
// transformers' tojson renders (and CPython's str methods).
#include <gtest/gtest.h>

#include "chat/jinja_strings.h"
#include "jinja_test_util.h"

namespace fp4::chat::jinja {
namespace {

using test_util::error_of;
using test_util::render;

const nlohmann::ordered_json kVars = {
    {"s", "  Hello, World!  "}, {"u", "héllo wörld ß"}, {"l", {3, 1, 2}}, {"words", {"b", "A", "c", "a"}},
    {"msgs", {{{"role", "user"}, {"n", 2}}, {{"role", "assistant"}, {"n", 1}}, {{"role", "user"}, {"n", 3}}}},
    {"d", {{"b", 1}, {"a", {1, {{"c", nullptr}}}}}}, {"multi", "one\ntwo\n\nfour\n"}};

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(render("[{{ s|trim }}] [{{ s|trim(' H!') }}] {{ s|upper }} {{ s|lower }}", kVars),
            "[Hello, World!] [ello, World]   HELLO, WORLD!     hello, world!  ");
  EXPECT_EQ(render("{{ 'hello world-wide (web) they\\'re'|title }} {{ 'hELLO wORLD'|capitalize }}", kVars),
            "Hello World-Wide (Web) They're Hello world");
  EXPECT_EQ(render("{{ u|upper }} {{ u|length }} {{ s|replace('l', 'L', 2) }}|{{ 42|string }}", kVars),
            "HÉLLO WÖRLD SS 13   HeLLo, World!  |42");
  EXPECT_EQ(render("{{ multi|indent }}|{{ multi|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}", kVars),
            "one\n    two\n\n    four\n|  one\n  two\n\n  four\n|a\n> \n> b");
  EXPECT_EQ(render("{{ '<a href=\"x\">&\\''|e }}"), "&lt;a href=&#34;x&#34;&gt;&amp;&#39;");
}

TEST(JinjaFilters, Sequences) {
  EXPECT_EQ(render("{{ l|first }} {{ l|last }} {{ l|length }} {{ l|join(', ') }} {{ l|sort }} {{ l|reverse|list }} "
                   "{{ l|max }} {{ l|min }} {{ l|sum }}", kVars),
            "3 2 3 3, 1, 2 [1, 2, 3] [2, 1, 3] 3 1 6");
  EXPECT_EQ(render("{{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ words|sort(reverse=true) }} "
                   "{{ words|unique|list }}", kVars),
            "['A', 'a', 'b', 'c'] ['A', 'a', 'b', 'c'] ['c', 'b', 'A', 'a'] ['b', 'A', 'c']");
  EXPECT_EQ(render("{{ 'abc'|list }} {{ d|list }} {{ d|items|list }} {{ []|first }}|{{ d|dictsort }}", kVars),
            "['a', 'b', 'c'] ['b', 'a'] [('b', 1), ('a', [1, {'c': None}])] |[('a', [1, {'c': None}]), ('b', 1)]");
  EXPECT_EQ(render("{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='n')|list }} "
                   "{{ msgs|rejectattr('n', 'gt', 1)|map(attribute='role')|list }} {{ msgs|sum(attribute='n') }} "
                   "{{ msgs|sort(attribute='n')|map(attribute='n')|join }} {{ msgs|join(',', attribute='role') }}",
                   kVars),
            "[2, 3] ['assistant'] 6 123 user,assistant,user");
  EXPECT_EQ(render("{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ [0, '', 'a', none]|select|list }} "
                   "{{ words|map('upper')|list }} {{ false|map('upper')|list }}", kVars),
            "[3, 1] [2] ['a'] ['B', 'A', 'C', 'A'] []");
}

TEST(JinjaFilters, Conversions) {
  EXPECT_EQ(render("{{ '42'|int }} {{ ' 7 '|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ 3.9|int }} "
                   "{{ '0x1A'|int(0, 16) }} {{ '1_000'|int }} {{ '2.5'|float }} {{ 'x'|float }}"),
            "42 7 4 0 -1 3 26 1000 2.5 0.0");
  EXPECT_EQ(render("{{ x|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ 0|d(5) }}"), "d  d 0");
  EXPECT_EQ(render("{{ -3|abs }} {{ (-2.5)|abs }} {{ 5|string ~ 1 }}"), "3 2.5 51");
  EXPECT_NE(error_of("{{ x|int }}").find("'x' is undefined"), std::string::npos);
}

TEST(JinjaFilters, TojsonIsTransformersJsonDumps) {
  EXPECT_EQ(render("{{ d|tojson }}", kVars), "{\"b\": 1, \"a\": [1, {\"c\": null}]}");
  EXPECT_EQ(render("{{ d|tojson(indent=2) }}", kVars),
            "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    {\n      \"c\": null\n    }\n  ]\n}");
  EXPECT_EQ(render("{{ [[], {}]|tojson(indent=1) }}"), "[\n [],\n {}\n]");
  EXPECT_EQ(render("{{ 'é<>&\\'\"\\n\\x01'|tojson }}"), "\"é<>&'\\\"\\n\\u0001\"");  // no HTML escaping
  EXPECT_EQ(render("{{ 'é😀'|tojson(ensure_ascii=true) }}"), "\"\\u00e9\\ud83d\\ude00\"");
  EXPECT_EQ(render("{{ d|tojson(sort_keys=true, separators=(',', ':')) }}", kVars), "{\"a\":[1,{\"c\":null}],\"b\":1}");
  EXPECT_EQ(render("{{ [1.0, 1e16, 0.1, true]|tojson }}"), "[1.0, 1e+16, 0.1, true]");
  EXPECT_NE(error_of("{{ x|tojson }}").find("Object of type Undefined is not JSON serializable"), std::string::npos);
}

TEST(JinjaFilters, PercentFormatting) {
  EXPECT_EQ(render("{{ '%s, %s!' % ('Hi', 3) }} {{ '%s'|format([1]) }} {{ '%(a)s=%(b)05.1f' % {'a': 'x', 'b': 2.25} }}"),
            "Hi, 3! [1] x=002.2");
  EXPECT_EQ(render("{{ '%5s|%-4d|%.2s|%r|%c' % ('ab', 7, 'xyz', 'q', 65) }} {{ '%x %#o %+d %03d %%' % (255, 8, 5, -5) }}"),
            "   ab|7   |xy|'q'|A ff 0o10 +5 -05 %");
  EXPECT_NE(error_of("{{ '%s %s' % 'a' }}").find("not enough arguments for format string"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' % 5 }}").find("not all arguments converted during string formatting"), std::string::npos);
}

TEST(JinjaTests, AllOfThem) {
  EXPECT_EQ(render("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 0 is none }}{{ 'a' is string }}"
                   "{{ {} is mapping }}{{ [] is mapping }}"),
            "FalseTrueTrueFalseTrueTrueFalse");
  EXPECT_EQ(render("{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.5 is float }}{{ false is boolean }}"
                   "{{ false is false }}{{ 0 is false }}{{ true is true }}"),
            "TrueTrueFalseTrueTrueTrueFalseTrue");
  EXPECT_EQ(render("{{ 'ab' is iterable }}{{ 1 is iterable }}{{ {} is sequence }}{{ x is iterable }}"
                   "{{ {}.keys() is sequence }}{{ {}.keys() is iterable }}"),
            "TrueFalseTrueTrueFalseTrue");
  EXPECT_EQ(render("{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 2 is in [1, 2] }}{{ 'ab' is lower }}"
                   "{{ 'AB' is upper }}{{ range is callable }}{{ 'trim' is filter }}{{ 'odd' is test }}"),
            "TrueFalseTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 1 is eq 1 }}{{ 1 is ne 1 }}{{ 2 is gt 1 }}{{ 2 is ge 3 }}{{ 1 is lt 2 }}{{ 2 is le 2 }}"
                   "{{ false is sameas false }}"),
            "TrueFalseTrueFalseTrueTrueTrue");
}

TEST(JinjaMethods, StrAndDict) {
  EXPECT_EQ(render("[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ 'xxaxx'.strip('x') }}]", kVars),
            "[Hello, World!][Hello, World!  ][  Hello, World!][a]");
  EXPECT_EQ(render("{{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} "
                   "{{ '  a  b  '.split(none, 1) }}", kVars),
            "['Hello,', 'World!'] ['a', 'b', '', 'c'] ['a', 'b c'] ['a b', 'c'] ['a', 'b  ']");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'bc')) }}{{ 'abc'.startswith('b', 1) }} "
                   "{{ u.find('w') }} {{ 'aaa'.count('a') }} {{ 'abc'.replace('', '-') }} {{ '-'.join(['a', 'b']) }}",
                   kVars),
            "TrueTrueTrue 6 3 -a-b-c- a-b");
  EXPECT_EQ(render("{{ 'they\\'re o\\'neil'.title() }} {{ u.upper() }} {{ 'ÀB'.lower() }} {{ '12'.isdigit() }}", kVars),
            "They'Re O'Neil HÉLLO WÖRLD SS àb True");
  EXPECT_EQ(render("{{ d.get('b') }} {{ d.get('z') }} {{ d.get('z', 0) }} {{ d.keys()|list }} {{ d.values()|list|length }}",
                   kVars),
            "1 None 0 ['b', 'a'] 2");
  EXPECT_NE(error_of("{{ 'a'.nope() }}").find("'str object' has no attribute 'nope'"), std::string::npos);
  EXPECT_NE(error_of("{{ [].append(1) }}").find("'list object' has no attribute 'append'"), std::string::npos);
}

TEST(JinjaStrings, Utf8RoundTripsEveryByte) {
  // Invalid UTF-8 survives decoding and encoding unchanged (surrogateescape).
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  EXPECT_EQ(utf8_encode(utf8_decode(bytes)), bytes);
  EXPECT_EQ(utf8_length("aé😀"), 3u);
  EXPECT_EQ(py_repr("it's"), "\"it's\"");
  EXPECT_EQ(py_repr("a\u00a0b\u200b"), "'a\\xa0b\\u200b'");
}

}  // namespace
}  // namespace fp4::chat::jinja
