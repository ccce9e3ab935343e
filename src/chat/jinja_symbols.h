// Jinja's static scoping, ported from jinja2/idtracking.py. Jinja compiles each frame (the
// template, a loop body, a macro...) to Python code whose variables are bound once, when the
// frame is entered, by rules decided at compile time from the order of reads and assignments.
// The rules are visible in output: `{% for %}{{ x }}{% endfor %}{% set x = 1 %}` prints nothing
// for x even when the caller passed one, because the template's own x shadows it from the start.
// Rendering the same way needs the same analysis.
#pragma once

#include "chat/jinja_ast.h"

namespace fp4::chat::jinja {

// Fills t.frame and every frame-opening statement's frame/else_frame/test_frame.
void analyze_frames(Template& t);

}  // namespace fp4::chat::jinja
