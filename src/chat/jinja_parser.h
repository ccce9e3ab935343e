// Parses tokens into statements, following jinja2/parser.py rule for rule so that precedence
// and the odd corners (filters binding tighter than unary minus, `a if b` without else, tests
// taking one bare argument) come out the same.
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"

namespace fp4::chat::jinja {

// Throws fp4::Error "chat template syntax error at line L, column C: ..." for bad syntax, an
// unknown tag, a tag fp4serve does not implement (include, extends, call...), or an unknown
// filter or test outside an if statement or conditional expression (Jinja checks those when
// they run). The result carries each frame's symbol analysis (jinja_symbols.h).
Template parse_template(std::string_view source);

}  // namespace fp4::chat::jinja
