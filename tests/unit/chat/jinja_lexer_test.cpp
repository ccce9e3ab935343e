// The lexer: tokens, positions, literals, and the whitespace rules of transformers' settings
// (trim_blocks, lstrip_blocks, `-` and `+` signs). Expected strings are what jinja2 3.1 prints
// for the same template with ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).
#include <gtest/gtest.h>

#include "chat/jinja_lexer.h"
#include "jinja_test_util.h"

namespace fp4::chat::jinja {
namespace {

using test_util::error_of;
using test_util::render;

std::vector<TokenType> types(std::string_view source) {
  std::vector<TokenType> out;
  for (const Token& t : tokenize(source)) out.push_back(t.type);
  return out;
}

TEST(JinjaLexer, SplitsTextAndTags) {
  using T = TokenType;
  EXPECT_EQ(types("a{{ x }}b{% if y %}c{% endif %}"),
            (std::vector<T>{T::Text, T::VariableBegin, T::Name, T::VariableEnd, T::Text, T::BlockBegin, T::Name,
                            T::Name, T::BlockEnd, T::Text, T::BlockBegin, T::Name, T::BlockEnd, T::End}));
  EXPECT_EQ(types("{# only a comment #}"), (std::vector<T>{T::End}));
  EXPECT_EQ(types(""), (std::vector<T>{T::End}));
}

TEST(JinjaLexer, PositionsAreLineAndCodePointColumn) {
  const auto toks = tokenize("é\n  {{ name }}");
  ASSERT_GE(toks.size(), 3u);
  EXPECT_EQ(toks[1].type, TokenType::VariableBegin);
  EXPECT_EQ(toks[1].pos.line, 2);
  EXPECT_EQ(toks[1].pos.column, 3);
  EXPECT_EQ(toks[2].value, "name");
  EXPECT_EQ(toks[2].pos.column, 6);
  const auto wide = tokenize("éé{{ x }}");  // two code points, four bytes
  EXPECT_EQ(wide[1].pos.column, 3);
}

TEST(JinjaLexer, NumberLiterals) {
  const auto toks = tokenize("{{ 42 1_000 0x1F 0o17 0b101 1.5 2e3 1.5E-2 7 }}");
  std::vector<int64_t> ints;
  std::vector<double> floats;
  for (const Token& t : toks) {
    if (t.type == TokenType::Integer) ints.push_back(t.int_value);
    if (t.type == TokenType::Float) floats.push_back(t.float_value);
  }
  EXPECT_EQ(ints, (std::vector<int64_t>{42, 1000, 31, 15, 5, 7}));
  EXPECT_EQ(floats, (std::vector<double>{1.5, 2000.0, 0.015}));
  EXPECT_NE(error_of("{{ 99999999999999999999 }}").find("integer literal too large"), std::string::npos);
}

TEST(JinjaLexer, StringEscapesFollowPythonUnicodeEscape) {
  EXPECT_EQ(render(R"({{ 'a\nb\tc\\d\'e\"f' }})"), "a\nb\tc\\d'e\"f");
  EXPECT_EQ(render(R"({{ '\x41\u00e9\U0001F600\101' }})"), "Aé😀A");
  EXPECT_EQ(render(R"({{ 'keep \q and \d' }})"), "keep \\q and \\d");  // unknown escapes stay
  EXPECT_EQ(render(R"({{ "it's" 'adjacent' }})"), "it'sadjacent");
  EXPECT_EQ(render("{{ 'multi\nline' }}"), "multi\nline");
}

TEST(JinjaLexer, TrailingNewlineDroppedAndNewlinesNormalized) {
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("a\r\nb\rc\n"), "a\nb\nc");
}

TEST(JinjaLexer, TrimBlocksRemovesOneNewlineAfterBlockTags) {
  EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(render("{# c #}\nA"), "A");
  EXPECT_EQ(render("{{ 'v' }}\nA"), "v\nA");  // not after {{ }}
  EXPECT_EQ(render("{% if true +%}\nA{% endif %}"), "\nA");  // + keeps it
}

TEST(JinjaLexer, LstripBlocksRemovesIndentBeforeBlockTags) {
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\n  y"), "  x\n  y");
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");  // not alone on its line
  EXPECT_EQ(render("  {{ 'v' }}"), "  v");                      // not before {{ }}
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");    // + keeps the indent
  EXPECT_EQ(render("\t {# c #}x"), "x");
}

TEST(JinjaLexer, MinusSignsStripAllWhitespace) {
  EXPECT_EQ(render("a \n {%- if true -%} \n b {%- endif -%} \n c"), "abc");
  EXPECT_EQ(render("a  {{- 'x' -}}  b"), "axb");
  EXPECT_EQ(render("a \u3000{{- 'x' }}"), "ax");  // Python's \s includes ideographic space
  EXPECT_EQ(render("a  {#- c -#}  b"), "ab");
}

TEST(JinjaLexer, RawBlocksAreText) {
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(render("a {%- raw -%}  x  {%- endraw -%}  b"), "axb");
  EXPECT_NE(error_of("{% raw %}never closed").find("missing end of raw directive"), std::string::npos);
}

TEST(JinjaLexer, BracesInsideTagsBalance) {
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
  EXPECT_EQ(render("{{ '}}' }}"), "}}");
}

TEST(JinjaLexer, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("line one\n  {{ 'open }}"),
            "chat template syntax error at line 2, column 6: unterminated string literal");
  EXPECT_EQ(error_of("{{ x\n"), "chat template syntax error at line 1, column 1: unexpected end of template, "
                                "the tag is not closed with '}}'");
  EXPECT_EQ(error_of("{{ 1 ! 2 }}"), "chat template syntax error at line 1, column 6: unexpected character '!'");
  EXPECT_EQ(error_of("ok\n{# never closed"), "chat template syntax error at line 2, column 1: missing end of comment tag");
  EXPECT_EQ(error_of("{{ (1 ] }}"), "chat template syntax error at line 1, column 7: unexpected ']', expected ')'");
  EXPECT_NE(error_of("{{ '\\x4' }}").find("truncated \\xXX"), std::string::npos);
}

}  // namespace
}  // namespace fp4::chat::jinja
