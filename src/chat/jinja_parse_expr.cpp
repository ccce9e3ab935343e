// Expressions, rule for rule as jinja2/parser.py: precedence from loosest to tightest is
// `a if b else c`, or, and, not, comparisons (chained, with in / not in), + -, ~, * / // %, **,
// unary - +, then postfix .attr [item] (call), and | filter / is test.
#include "chat/jinja_parser_impl.h"

namespace fp4::chat::jinja {

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, Names extra, bool explicit_parentheses) {
  const SourcePos pos = cur().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra)) break;
    items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) fail(cur(), "expected an expression, got " + describe(cur()));
  }
  auto e = make_expr(ExprKind::Tuple, pos);
  e->operands = std::move(items);
  return e;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  ExprPtr value = parse_or();
  while (is_name("if")) {
    const SourcePos pos = next().pos;
    auto e = make_expr(ExprKind::CondExpr, pos);
    ExprPtr condition = parse_or();
    ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
    e->operands.push_back(std::move(value));
    e->operands.push_back(std::move(condition));
    e->operands.push_back(std::move(otherwise));
    value = std::move(e);
  }
  return value;
}

ExprPtr Parser::binary(std::string op, SourcePos pos, ExprPtr left, ExprPtr right) {
  auto e = make_expr(ExprKind::Binary, pos);
  e->name = std::move(op);
  e->operands.push_back(std::move(left));
  e->operands.push_back(std::move(right));
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const SourcePos pos = next().pos;
    left = binary("or", pos, std::move(left), parse_and());
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const SourcePos pos = next().pos;
    left = binary("and", pos, std::move(left), parse_not());
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    auto e = make_expr(ExprKind::Unary, next().pos);
    e->name = "not";
    e->operands.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const SourcePos pos = cur().pos;
  ExprPtr first = parse_math1();
  std::vector<std::string> ops;
  std::vector<ExprPtr> rest;
  while (true) {
    if (cur().type == TokenType::Operator &&
        (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == ">" ||
         cur().value == "<=" || cur().value == ">=")) {
      ops.push_back(next().value);
    } else if (skip_name("in")) {
      ops.push_back("in");
    } else if (is_name("not") && look().type == TokenType::Name && look().value == "in") {
      next();
      next();
      ops.push_back("notin");
    } else {
      break;
    }
    rest.push_back(parse_math1());
  }
  if (ops.empty()) return first;
  auto e = make_expr(ExprKind::Compare, pos);
  e->operands.push_back(std::move(first));
  for (auto& r : rest) e->operands.push_back(std::move(r));
  e->ops = std::move(ops);
  return e;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = next();
    left = binary(t.value, t.pos, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const SourcePos pos = cur().pos;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = make_expr(ExprKind::Concat, pos);
  e->operands.push_back(std::move(first));
  while (skip_op("~")) e->operands.push_back(parse_math2());
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = next();
    left = binary(t.value, t.pos, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const Token& t = next();
    left = binary("**", t.pos, std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    node = make_expr(ExprKind::Unary, cur().pos);
    node->name = next().value;
    node->operands.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  switch (t.type) {
    case TokenType::Name: {
      next();
      auto e = make_expr(ExprKind::Const, t.pos);
      if (t.value == "true" || t.value == "True") e->constant = Value(true);
      else if (t.value == "false" || t.value == "False") e->constant = Value(false);
      else if (t.value == "none" || t.value == "None") e->constant = Value::none();
      else {
        e->kind = ExprKind::Name;
        e->name = t.value;
      }
      return e;
    }
    case TokenType::String: {
      auto e = make_expr(ExprKind::Const, t.pos);
      std::string s;
      while (cur().type == TokenType::String) s += next().value;
      e->constant = Value(std::move(s));
      return e;
    }
    case TokenType::Integer:
    case TokenType::Float: {
      next();
      auto e = make_expr(ExprKind::Const, t.pos);
      e->constant = t.type == TokenType::Integer ? Value(t.int_value) : Value(t.float_value);
      return e;
    }
    default: break;
  }
  if (skip_op("(")) {
    ExprPtr e = parse_tuple(false, true, {}, true);
    expect_op(")");
    return e;
  }
  if (is_op("[") || is_op("{")) {
    const bool is_list = is_op("[");
    auto e = make_expr(is_list ? ExprKind::List : ExprKind::Dict, next().pos);
    const char* close = is_list ? "]" : "}";
    while (!is_op(close)) {
      if (!e->operands.empty()) expect_op(",");
      if (is_op(close)) break;
      e->operands.push_back(parse_expression(true));
      if (!is_list) {
        expect_op(":");
        e->operands.push_back(parse_expression(true));
      }
    }
    next();
    return e;
  }
  fail(t, "unexpected " + describe(t));
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      node = parse_filter(std::move(node), false);
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  if (t.value == ".") {
    const Token& attr = next();
    if (attr.type == TokenType::Name) {
      auto e = make_expr(ExprKind::GetAttr, t.pos);
      e->name = attr.value;
      e->operands.push_back(std::move(node));
      return e;
    }
    if (attr.type != TokenType::Integer) fail(attr, "expected name or number");
    auto e = make_expr(ExprKind::GetItem, t.pos);
    auto key = make_expr(ExprKind::Const, attr.pos);
    key->constant = Value(attr.int_value);
    e->operands.push_back(std::move(node));
    e->operands.push_back(std::move(key));
    return e;
  }
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  next();
  auto e = make_expr(ExprKind::GetItem, t.pos);
  e->operands.push_back(std::move(node));
  if (args.size() == 1) {
    e->operands.push_back(std::move(args[0]));
  } else {
    auto tuple = make_expr(ExprKind::Tuple, t.pos);
    tuple->operands = std::move(args);
    e->operands.push_back(std::move(tuple));
  }
  return e;
}

ExprPtr Parser::parse_subscribed() {
  const SourcePos pos = cur().pos;
  std::vector<ExprPtr> args;
  if (skip_op(":")) {
    args.push_back(nullptr);
  } else {
    ExprPtr node = parse_expression(true);
    if (!skip_op(":")) return node;
    args.push_back(std::move(node));
  }
  auto bound_or_null = [&]() -> ExprPtr {
    if (is_op("]") || is_op(",") || is_op(":")) return nullptr;
    return parse_expression(true);
  };
  args.push_back(bound_or_null());
  args.push_back(skip_op(":") ? bound_or_null() : nullptr);
  auto e = make_expr(ExprKind::Slice, pos);
  e->operands = std::move(args);
  return e;
}

void Parser::parse_call_args(Expr& e) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) {
      expect_op(",");
      if (is_op(")")) break;
    }
    first = false;
    if (is_op("*") || is_op("**")) fail(cur(), "*args and **kwargs are not supported in chat templates");
    if (cur().type == TokenType::Name && look().type == TokenType::Operator && look().value == "=") {
      Keyword kw;
      kw.name = next().value;
      next();
      kw.value = parse_expression(true);
      e.keywords.push_back(std::move(kw));
    } else {
      if (!e.keywords.empty()) fail(cur(), "invalid syntax for function call expression");
      e.operands.push_back(parse_expression(true));
    }
  }
  next();
}

ExprPtr Parser::parse_call(ExprPtr node) {
  auto e = make_expr(ExprKind::Call, cur().pos);
  e->operands.push_back(std::move(node));
  parse_call_args(*e);
  return e;
}

std::string Parser::dotted_name() {
  std::string name = expect_name();
  while (skip_op(".")) name += "." + expect_name();
  return name;
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const Token& t = cur();
    auto e = make_expr(ExprKind::Filter, t.pos);
    e->name = dotted_name();
    e->operands.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    node = std::move(e);
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  next();
  const bool negated = skip_name("not");
  const Token& t = cur();
  auto e = make_expr(ExprKind::Test, t.pos);
  e->name = dotted_name();
  e->negated = negated;
  e->operands.push_back(std::move(node));
  const TokenType type = cur().type;
  if (is_op("(")) {
    parse_call_args(*e);
  } else if ((type == TokenType::Name || type == TokenType::String || type == TokenType::Integer ||
              type == TokenType::Float || is_op("[") || is_op("{")) &&
             !among(cur(), {"else", "or", "and"})) {
    if (is_name("is")) fail(cur(), "You cannot chain multiple tests with is");
    e->operands.push_back(parse_postfix(parse_primary()));
  }
  return e;
}

}  // namespace fp4::chat::jinja
