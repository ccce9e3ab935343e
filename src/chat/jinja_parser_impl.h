// The parser's class, shared by jinja_parser.cpp (statements) and jinja_parse_expr.cpp
// (expressions). Private to src/chat.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "chat/jinja_ast.h"

namespace fp4::chat::jinja {

// Nesting deeper than this is refused rather than risking the stack.
inline constexpr int kMaxParseDepth = 200;

inline ExprPtr make_expr(ExprKind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

// One instance parses one template; it follows jinja2/parser.py method for method.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse() {
    Body body = subparse({});
    if (cur().type != TokenType::End) fail(cur(), "unexpected " + describe(cur()));
    return body;
  }

 private:
  using Names = std::initializer_list<std::string_view>;

  const Token& cur() const { return toks_[i_]; }
  const Token& look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  [[noreturn]] void fail(const Token& at, const std::string& message) const {
    syntax_error(at.pos, message);
  }

  bool is_op(std::string_view op) const {
    return cur().type == TokenType::Operator && cur().value == op;
  }
  bool is_name(std::string_view name) const {
    return cur().type == TokenType::Name && cur().value == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  void expect(TokenType type, std::string_view what) {
    if (cur().type != type) fail(cur(), fmt::format("expected {}, got {}", what, describe(cur())));
    next();
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name) fail(cur(), "expected a name, got " + describe(cur()));
    return next().value;
  }
  static bool among(const Token& t, Names names) {
    return t.type == TokenType::Name && std::find(names.begin(), names.end(), t.value) != names.end();
  }

  // Statements (jinja_parser.cpp).
  Body subparse(Names end_names);

  // After the tag's own words: '%}', the body, and the end tag (consumed when drop_needle).
  Body parse_statements(Names end_names, bool drop_needle);
  StmtPtr stmt(StmtKind kind, SourcePos pos);
  StmtPtr parse_statement();
  StmtPtr parse_if();

  // Names for `for` and `set` targets: a, b / (a, b); `in` or `=` ends them.
  std::vector<std::string> parse_target_names(Names end_names);
  StmtPtr parse_for();
  StmtPtr parse_set();
  StmtPtr parse_macro();
  StmtPtr parse_with();
  StmtPtr parse_filter_block();

  // Expressions (jinja_parse_expr.cpp).
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) p_.fail(p_.cur(), "expression nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  bool is_tuple_end(Names extra) const {
    return cur().type == TokenType::VariableEnd || cur().type == TokenType::BlockEnd || is_op(")") ||
           (extra.size() && among(cur(), extra));
  }
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, Names extra, bool explicit_parentheses);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr binary(std::string op, SourcePos pos, ExprPtr left, ExprPtr right);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();

  // (args, name=value, ...) into e->operands (after what is already there) and e->keywords.
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr node);
  std::string dotted_name();
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace fp4::chat::jinja
