// Evaluates a parsed template. Scoping follows Jinja's compiled code (jinja_symbols.h): each
// loop iteration, macro call and block enters a frame whose variables are bound on entry, `if`
// opens none, assignments at the top level are also published to the render context (where
// macros and later frames resolve them), and namespace() objects are how a loop reports out.
//
// Rendering touches no shared state: any number of threads may render the same Body at once.
#pragma once

#include <string>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace fp4::chat::jinja {

// `globals` are the variables and functions the template sees (messages, raise_exception, ...).
// Throws EvalError ("chat template error at line L, column C: ...") or TemplateRaised.
std::string render(const Template& tmpl, const DictData& globals);

}  // namespace fp4::chat::jinja
