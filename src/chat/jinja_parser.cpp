#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include <fmt/format.h>

#include "chat/jinja_builtins.h"
#include "chat/jinja_symbols.h"

namespace fp4::chat::jinja {

namespace {

// Nesting deeper than this is refused rather than risking the stack.
constexpr int kMaxDepth = 200;

ExprPtr make(ExprKind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

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

  // ---- statements ----

  Body subparse(Names end_names) {
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

  // After the tag's own words: '%}', the body, and the end tag (consumed when drop_needle).
  Body parse_statements(Names end_names, bool drop_needle) {
    skip_op(":");
    expect(TokenType::BlockEnd, "'%}'");
    Body body = subparse(end_names);
    if (drop_needle) next();
    return body;
  }

  StmtPtr stmt(StmtKind kind, SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = pos;
    return s;
  }

  StmtPtr parse_statement() {
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

  StmtPtr parse_if() {
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

  // Names for `for` and `set` targets: a, b / (a, b); `in` or `=` ends them.
  std::vector<std::string> parse_target_names(Names end_names) {
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

  StmtPtr parse_for() {
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

  StmtPtr parse_set() {
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

  StmtPtr parse_macro() {
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

  StmtPtr parse_with() {
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

  StmtPtr parse_filter_block() {
    auto s = stmt(StmtKind::FilterBlock, next().pos);
    s->filter = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  // ---- expressions ----

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.fail(p_.cur(), "expression nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  bool is_tuple_end(Names extra) const {
    return cur().type == TokenType::VariableEnd || cur().type == TokenType::BlockEnd || is_op(")") ||
           (extra.size() && among(cur(), extra));
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, Names extra, bool explicit_parentheses) {
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
    auto e = make(ExprKind::Tuple, pos);
    e->operands = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr value = parse_or();
    while (is_name("if")) {
      const SourcePos pos = next().pos;
      auto e = make(ExprKind::CondExpr, pos);
      ExprPtr condition = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      e->operands.push_back(std::move(value));
      e->operands.push_back(std::move(condition));
      e->operands.push_back(std::move(otherwise));
      value = std::move(e);
    }
    return value;
  }

  ExprPtr binary(std::string op, SourcePos pos, ExprPtr left, ExprPtr right) {
    auto e = make(ExprKind::Binary, pos);
    e->name = std::move(op);
    e->operands.push_back(std::move(left));
    e->operands.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const SourcePos pos = next().pos;
      left = binary("or", pos, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const SourcePos pos = next().pos;
      left = binary("and", pos, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = make(ExprKind::Unary, next().pos);
      e->name = "not";
      e->operands.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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
    auto e = make(ExprKind::Compare, pos);
    e->operands.push_back(std::move(first));
    for (auto& r : rest) e->operands.push_back(std::move(r));
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      left = binary(t.value, t.pos, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const SourcePos pos = cur().pos;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprKind::Concat, pos);
    e->operands.push_back(std::move(first));
    while (skip_op("~")) e->operands.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      left = binary(t.value, t.pos, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& t = next();
      left = binary("**", t.pos, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(ExprKind::Unary, cur().pos);
      node->name = next().value;
      node->operands.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case TokenType::Name: {
        next();
        auto e = make(ExprKind::Const, t.pos);
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
        auto e = make(ExprKind::Const, t.pos);
        std::string s;
        while (cur().type == TokenType::String) s += next().value;
        e->constant = Value(std::move(s));
        return e;
      }
      case TokenType::Integer:
      case TokenType::Float: {
        next();
        auto e = make(ExprKind::Const, t.pos);
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
      auto e = make(is_list ? ExprKind::List : ExprKind::Dict, next().pos);
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

  ExprPtr parse_postfix(ExprPtr node) {
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

  ExprPtr parse_filter_expr(ExprPtr node) {
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

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    if (t.value == ".") {
      const Token& attr = next();
      if (attr.type == TokenType::Name) {
        auto e = make(ExprKind::GetAttr, t.pos);
        e->name = attr.value;
        e->operands.push_back(std::move(node));
        return e;
      }
      if (attr.type != TokenType::Integer) fail(attr, "expected name or number");
      auto e = make(ExprKind::GetItem, t.pos);
      auto key = make(ExprKind::Const, attr.pos);
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
    auto e = make(ExprKind::GetItem, t.pos);
    e->operands.push_back(std::move(node));
    if (args.size() == 1) {
      e->operands.push_back(std::move(args[0]));
    } else {
      auto tuple = make(ExprKind::Tuple, t.pos);
      tuple->operands = std::move(args);
      e->operands.push_back(std::move(tuple));
    }
    return e;
  }

  ExprPtr parse_subscribed() {
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
    auto e = make(ExprKind::Slice, pos);
    e->operands = std::move(args);
    return e;
  }

  // (args, name=value, ...) into e->operands (after what is already there) and e->keywords.
  void parse_call_args(Expr& e) {
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

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::Call, cur().pos);
    e->operands.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const Token& t = cur();
      auto e = make(ExprKind::Filter, t.pos);
      e->name = dotted_name();
      if (std::string err = check_filter_name(e->name); !err.empty()) fail(t, err);
      e->operands.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    next();
    const bool negated = skip_name("not");
    const Token& t = cur();
    auto e = make(ExprKind::Test, t.pos);
    e->name = dotted_name();
    if (std::string err = check_test_name(e->name); !err.empty()) fail(t, err);
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

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Template parse_template(std::string_view source) {
  Template t;
  t.body = Parser(tokenize(source)).parse();
  analyze_frames(t);
  return t;
}

}  // namespace fp4::chat::jinja
