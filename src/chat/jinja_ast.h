// The parsed form of a template: expressions and statements, each with its source position.
// One generic node type per family keeps the parser and the evaluator short; each kind's
// comment says which fields it uses.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/jinja_lexer.h"
#include "chat/jinja_value.h"

namespace fp4::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  Const,     // constant
  Name,      // name
  List,      // operands: items
  Tuple,     // operands: items
  Dict,      // operands: key, value, key, value, ...
  GetAttr,   // operands[0].name
  GetItem,   // operands[0][operands[1]]
  Slice,     // operands: start, stop, step (each may be null); only inside GetItem
  Call,      // operands[0](operands[1:], keywords)
  Filter,    // operands[0] | name(operands[1:], keywords); operands[0] null in filter blocks
  Test,      // operands[0] is [not] name(operands[1:], keywords); negated
  Unary,     // name: "-", "+" or "not"; operands[0]
  Binary,    // name: + - * / // % ** and or; operands[0], operands[1]
  Concat,    // operands joined with ~
  Compare,   // operands[0] ops[0] operands[1] ops[1] operands[2] ...
  CondExpr,  // operands: value-if-true, condition, value-if-false (may be null)
};

struct Keyword {
  std::string name;
  ExprPtr value;
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  Value constant;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<Keyword> keywords;
  std::vector<std::string> ops;
  bool negated = false;
};

// How a frame (the template, a loop body, a macro, a block) gets each of its variables when it
// is entered, as Jinja's compiler decides statically (jinja2/idtracking.py): a parameter is
// bound by the construct itself; `resolve` reads the render context (the caller's variables and
// the template's top-level assignments so far); `alias` copies the enclosing frame's variable;
// `undefined` starts unset because the frame assigns it before any read.
enum class LoadKind { Param, Resolve, Alias, Undefined };

struct FrameSymbols {
  std::vector<std::pair<std::string, LoadKind>> loads;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  Text,         // text
  Print,        // {{ expr }}
  If,           // branches (conditions and bodies), else_body
  For,          // targets in expr [if filter]: body, else_body
  Set,          // targets (or ns_attr on targets[0]) = expr
  SetBlock,     // targets[0] = rendered body, through `filter` when given
  Macro,        // targets[0](params): body
  Break,
  Continue,
  Scope,        // body in a new scope after binding params (with); body alone (generation)
  FilterBlock,  // body rendered, then through `filter`
};

struct Branch {
  ExprPtr condition;
  Body body;
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<Branch> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string ns_attr;  // Set: `set targets[0].ns_attr = ...`
  std::vector<Param> params;
  // The frames this statement opens: a loop body, macro, block or scope (frame), a for loop's
  // else branch (else_frame) and its `if` filter (test_frame).
  FrameSymbols frame;
  FrameSymbols else_frame;
  FrameSymbols test_frame;
};

struct Template {
  Body body;
  FrameSymbols frame;
};

}  // namespace fp4::chat::jinja
