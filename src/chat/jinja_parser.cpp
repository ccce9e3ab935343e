#include "chat/jinja_parser.h"

#include "chat/jinja_builtins.h"
#include "chat/jinja_parser_impl.h"
#include "chat/jinja_symbols.h"

namespace fp4::chat::jinja {

namespace {

// Jinja refuses an unknown filter or test name when it compiles the template, except inside an
// if statement or an `a if b else c` expression (its "soft" frames), where the name fails only
// if that code runs. Frames opened inside those (loop bodies, macros, blocks) are not soft.
void check_names(const Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == ExprKind::Filter || e->kind == ExprKind::Test) {
    const std::string err = e->kind == ExprKind::Filter ? check_filter_name(e->name) : check_test_name(e->name);
    if (!err.empty() && !soft) syntax_error(e->pos, err);
  }
  const bool inner_soft = soft || e->kind == ExprKind::CondExpr;
  for (const ExprPtr& operand : e->operands) check_names(operand.get(), inner_soft);
  for (const Keyword& kw : e->keywords) check_names(kw.value.get(), inner_soft);
}

void check_names(const Body& body, bool soft) {
  for (const StmtPtr& s : body) {
    check_names(s->expr.get(), soft);  // print, set, the iterable of a for loop
    for (const Branch& b : s->branches) {
      check_names(b.condition.get(), true);
      check_names(b.body, true);
    }
    const bool opens_frame = s->kind != StmtKind::If;
    check_names(s->else_body, !opens_frame);
    check_names(s->filter.get(), false);
    for (const Param& p : s->params) check_names(p.default_value.get(), s->kind == StmtKind::Scope && soft);
    check_names(s->body, false);
  }
}

}  // namespace

Body Parser::subparse(Names end_names) {
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == TokenType::Text) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::Text;
      s->pos = t.pos;
      s->text = next().value;
      body.push_back(std::move(s));
    } else if (t.type == TokenType::VariableBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::Print;
      s->pos = next().pos;
      s->expr = parse_tuple(false, true, {}, false);
      expect(TokenType::VariableEnd, "'}}'");
      body.push_back(std::move(s));
    } else if (t.type == TokenType::BlockBegin) {
      next();
      if (end_names.size() && among(cur(), end_names)) return body;
      body.push_back(parse_statement());
      expect(TokenType::BlockEnd, "'%}'");
    } else {
      if (end_names.size()) {
        std::string wanted;
        for (std::string_view n : end_names) wanted += (wanted.empty() ? "'" : " or '") + std::string(n) + "'";
        fail(t, "unexpected end of template, expected " + wanted);
      }
      return body;
    }
  }
}

Body Parser::parse_statements(Names end_names, bool drop_needle) {
  skip_op(":");
  expect(TokenType::BlockEnd, "'%}'");
  Body body = subparse(end_names);
  if (drop_needle) next();
  return body;
}

StmtPtr Parser::stmt(StmtKind kind, SourcePos pos) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->pos = pos;
  return s;
}

StmtPtr Parser::parse_statement() {
  const Token& t = cur();
  if (t.type != TokenType::Name) fail(t, "tag name expected");
  const std::string& tag = t.value;
  if (tag == "if") return parse_if();
  if (tag == "for") return parse_for();
  if (tag == "set") return parse_set();
  if (tag == "macro") return parse_macro();
  if (tag == "with") return parse_with();
  if (tag == "filter") return parse_filter_block();
  if (tag == "generation") {
    auto s = stmt(StmtKind::Scope, next().pos);
    s->body = parse_statements({"endgeneration"}, true);
    return s;
  }
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) fail(t, fmt::format("'{}' outside of a for loop", tag));
    return stmt(tag == "break" ? StmtKind::Break : StmtKind::Continue, next().pos);
  }
  static constexpr std::string_view kJinjaTags[] = {
      "block", "extends", "include", "import", "from", "call", "autoescape", "do", "trans"};
  for (std::string_view known : kJinjaTags) {
    if (tag == known) fail(t, fmt::format("tag '{}' is not supported in chat templates", tag));
  }
  if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif") {
    fail(t, fmt::format("unexpected '{}'", tag));
  }
  fail(t, fmt::format("unknown tag '{}'", tag));
}

StmtPtr Parser::parse_if() {
  auto s = stmt(StmtKind::If, next().pos);
  while (true) {
    Branch branch;
    branch.condition = parse_tuple(false, false, {}, false);
    branch.body = parse_statements({"elif", "else", "endif"}, false);
    s->branches.push_back(std::move(branch));
    const std::string word = next().value;
    if (word == "elif") continue;
    if (word == "else") s->else_body = parse_statements({"endif"}, true);
    return s;
  }
}

std::vector<std::string> Parser::parse_target_names(Names end_names) {
  std::vector<std::string> names;
  const bool paren = skip_op("(");
  while (true) {
    if (cur().type != TokenType::Name || among(cur(), end_names)) {
      fail(cur(), "can't assign to " + describe(cur()));
    }
    names.push_back(next().value);
    if (!skip_op(",")) break;
    if (paren ? is_op(")") : among(cur(), end_names) || is_op("=")) break;
  }
  if (paren) expect_op(")");
  return names;
}

StmtPtr Parser::parse_for() {
  auto s = stmt(StmtKind::For, next().pos);
  s->targets = parse_target_names({"in"});
  if (!skip_name("in")) fail(cur(), "expected 'in', got " + describe(cur()));
  s->expr = parse_tuple(false, false, {"recursive"}, false);
  if (skip_name("if")) s->filter = parse_expression(true);
  if (is_name("recursive")) fail(cur(), "recursive for loops are not supported in chat templates");
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (next().value == "else") s->else_body = parse_statements({"endfor"}, true);
  return s;
}

StmtPtr Parser::parse_set() {
  const SourcePos pos = next().pos;
  StmtPtr s;
  if (cur().type == TokenType::Name && look().type == TokenType::Operator && look().value == ".") {
    s = stmt(StmtKind::Set, pos);
    s->targets.push_back(next().value);
    next();
    s->ns_attr = expect_name();
  } else {
    s = stmt(StmtKind::Set, pos);
    s->targets = parse_target_names({});
  }
  if (skip_op("=")) {
    s->expr = parse_tuple(false, true, {}, false);
    return s;
  }
  if (!s->ns_attr.empty() || s->targets.size() != 1) fail(cur(), "expected '='");
  s->kind = StmtKind::SetBlock;
  if (is_op("|")) s->filter = parse_filter(nullptr, false);
  s->body = parse_statements({"endset"}, true);
  return s;
}

StmtPtr Parser::parse_macro() {
  auto s = stmt(StmtKind::Macro, next().pos);
  s->targets.push_back(expect_name());
  expect_op("(");
  while (!is_op(")")) {
    if (!s->params.empty()) expect_op(",");
    if (is_op(")")) break;
    Param p;
    p.name = expect_name();
    if (skip_op("=")) {
      p.default_value = parse_expression(true);
    } else if (!s->params.empty() && s->params.back().default_value) {
      fail(cur(), "non-default argument follows default argument");
    }
    s->params.push_back(std::move(p));
  }
  next();
  const int saved = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endmacro"}, true);
  loop_depth_ = saved;
  return s;
}

StmtPtr Parser::parse_with() {
  auto s = stmt(StmtKind::Scope, next().pos);
  while (cur().type != TokenType::BlockEnd) {
    if (!s->params.empty()) expect_op(",");
    Param p;
    p.name = expect_name();
    expect_op("=");
    p.default_value = parse_expression(true);
    s->params.push_back(std::move(p));
  }
  s->body = parse_statements({"endwith"}, true);
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = stmt(StmtKind::FilterBlock, next().pos);
  s->filter = parse_filter(nullptr, true);
  s->body = parse_statements({"endfilter"}, true);
  return s;
}

Template parse_template(std::string_view source) {
  Template t;
  t.body = Parser(tokenize(source)).parse();
  check_names(t.body, false);
  analyze_frames(t);
  return t;
}

}  // namespace fp4::chat::jinja
