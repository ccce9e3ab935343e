// Splits a template into text and tag tokens exactly as Jinja's lexer does with transformers'
// settings (trim_blocks and lstrip_blocks on, keep_trailing_newline off): the text around tags
// is already trimmed as `-`, `+`, trim_blocks and lstrip_blocks demand, comments are dropped and
// {% raw %} sections arrive as text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp4::chat::jinja {

struct SourcePos {
  int line = 1;
  int column = 1;  // in code points, from 1
};

enum class TokenType {
  Text,          // template text between tags
  VariableBegin, // {{
  VariableEnd,   // }}
  BlockBegin,    // {%
  BlockEnd,      // %}
  Name,
  String,        // value: the literal with its escapes decoded
  Integer,
  Float,
  Operator,      // value: the operator's text
  End,
};

struct Token {
  TokenType type;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
  SourcePos pos;
};

// Throws fp4::Error "chat template syntax error at line L, column C: ..." on bad input.
std::vector<Token> tokenize(std::string_view source);

std::string describe(const Token& token);  // for error messages: 'name', end of template, ...

// fp4::Error "chat template syntax error at line L, column C: <message>".
[[noreturn]] void syntax_error(SourcePos pos, const std::string& message);

}  // namespace fp4::chat::jinja
