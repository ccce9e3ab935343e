#include "chat/jinja_render.h"

#include <deque>
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_error.h"
#include "chat/jinja_ops.h"

namespace fp4::chat::jinja {

namespace {

// Recursive macros deeper than this are refused rather than exhausting the stack.
constexpr int kMaxCallDepth = 100;

// One entered frame: its variables, bound on entry as the frame's symbols say.
struct Scope {
  Scope* parent = nullptr;
  bool toplevel = false;  // the template's own frame: assignments are published to the context
  std::unordered_map<std::string, Value> vars;
};

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  explicit Renderer(const DictData& globals) {
    for (const auto& [name, value] : globals.entries()) globals_[name] = value;
  }

  std::string run(const Template& tmpl) {
    std::string out;
    exec(tmpl.body, &enter(nullptr, tmpl.frame, true), out);
    return out;
  }

 private:
  static Value missing(const std::string& name) {
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  // Jinja's context.resolve: the template's top-level assignments so far, then the caller's
  // variables and the environment's globals.
  Value resolve(const std::string& name) const {
    if (const auto it = exported_.find(name); it != exported_.end()) return it->second;
    if (const auto it = globals_.find(name); it != globals_.end()) return it->second;
    return missing(name);
  }

  Scope& enter(Scope* parent, const FrameSymbols& symbols, bool toplevel = false) {
    scopes_.push_back(Scope{parent, toplevel, {}});
    Scope& scope = scopes_.back();
    for (const auto& [name, kind] : symbols.loads) {
      switch (kind) {
        case LoadKind::Param: break;  // bound by the construct that opens the frame
        case LoadKind::Resolve: scope.vars[name] = resolve(name); break;
        case LoadKind::Alias: scope.vars[name] = lookup(parent, name); break;
        case LoadKind::Undefined: scope.vars[name] = missing(name); break;
      }
    }
    return scope;
  }

  [[noreturn]] static void rethrow_at(const EvalError& e, SourcePos pos) {
    throw EvalError(fmt::format("chat template error at line {}, column {}: {}", pos.line, pos.column, e.what()),
                    true);
  }

  Value lookup(Scope* scope, const std::string& name) const {
    for (Scope* s = scope; s; s = s->parent) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    return resolve(name);
  }

  void store(Scope* scope, const std::string& name, const Value& value) {
    scope->vars[name] = value;
    if (scope->toplevel) exported_[name] = value;
  }

  void assign(Scope* scope, const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
      store(scope, targets[0], value);
      return;
    }
    const std::vector<Value> items = iterate(value);
    if (items.size() != targets.size()) {
      eval_fail("{} values to unpack (expected {}, got {})", items.size() > targets.size() ? "too many" : "not enough",
                targets.size(), items.size());
    }
    for (size_t i = 0; i < targets.size(); ++i) store(scope, targets[i], items[i]);
  }

  // ---- statements ----

  Flow exec(const Body& body, Scope* scope, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow flow = exec_stmt(*s, scope, out);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec_stmt(const Stmt& s, Scope* scope, std::string& out) {
    try {
      return exec_inner(s, scope, out);
    } catch (const EvalError& e) {
      if (e.positioned()) throw;
      rethrow_at(e, s.pos);
    }
  }

  Flow exec_inner(const Stmt& s, Scope* scope, std::string& out) {
    switch (s.kind) {
      case StmtKind::Text: out += s.text; break;
      case StmtKind::Print: out += to_str(eval(*s.expr, scope)); break;
      case StmtKind::If:
        for (const Branch& b : s.branches) {
          if (truthy(eval(*b.condition, scope))) return exec(b.body, scope, out);
        }
        return exec(s.else_body, scope, out);
      case StmtKind::For: exec_for(s, scope, out); break;
      case StmtKind::Set: {
        Value v = eval(*s.expr, scope);
        if (s.ns_attr.empty()) {
          assign(scope, s.targets, v);
          break;
        }
        const Value ns = lookup(scope, s.targets[0]);
        if (ns.kind() != Value::Kind::Namespace) {
          eval_fail("cannot assign attribute on non-namespace object '{}'", s.targets[0]);
        }
        ns.namespace_data().set(s.ns_attr, std::move(v));
        break;
      }
      case StmtKind::SetBlock: {
        Scope& block = enter(scope, s.frame);
        std::string captured;
        exec(s.body, &block, captured);
        Value v(std::move(captured));
        store(scope, s.targets[0], s.filter ? apply_filters(*s.filter, std::move(v), &block) : v);
        break;
      }
      case StmtKind::Macro: store(scope, s.targets[0], make_macro(s, scope)); break;
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
      case StmtKind::Scope: {
        Scope& inner = enter(scope, s.frame);
        for (const Param& p : s.params) inner.vars[p.name] = eval(*p.default_value, scope);
        return exec(s.body, &inner, out);
      }
      case StmtKind::FilterBlock: {
        Scope& inner = enter(scope, s.frame);
        std::string captured;
        exec(s.body, &inner, captured);
        out += to_str(apply_filters(*s.filter, Value(std::move(captured)), &inner));
        break;
      }
    }
    if (out.size() > kMaxStringBytes) eval_fail("the rendered prompt exceeds {} bytes", kMaxStringBytes);
    return Flow::Normal;
  }

  // The `if` filter runs over all items before the body does (Jinja interleaves the two
  // lazily; they differ only for a filter that reads what the body changes in a namespace).
  void exec_for(const Stmt& s, Scope* scope, std::string& out) {
    std::vector<Value> items = iterate(eval(*s.expr, scope));
    if (s.filter) {
      Scope& test = enter(scope, s.test_frame);
      std::vector<Value> kept;
      for (Value& item : items) {
        assign(&test, s.targets, item);
        if (truthy(eval(*s.filter, &test))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(s.else_body, &enter(scope, s.else_frame), out);
      return;
    }
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Scope& iteration = enter(scope, s.frame);
      assign(&iteration, s.targets, items[static_cast<size_t>(i)]);
      iteration.vars["loop"] = loop_object(items, i);
      if (exec(s.body, &iteration, out) == Flow::Break) break;
    }
  }

  static Value loop_object(const std::vector<Value>& items, int64_t i) {
    const auto n = static_cast<int64_t>(items.size());
    DictData loop;
    loop.set("index", Value(i + 1));
    loop.set("index0", Value(i));
    loop.set("revindex", Value(n - i));
    loop.set("revindex0", Value(n - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == n - 1));
    loop.set("length", Value(n));
    loop.set("depth", Value(1));
    loop.set("depth0", Value(0));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
    loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
    loop.set("cycle", Value::callable("loop.cycle", [i](CallArgs& args) {
               if (args.positional.empty()) eval_fail("no items for cycling given");
               return args.positional[static_cast<size_t>(i) % args.positional.size()];
             }));
    return Value::dict(std::move(loop));
  }

  Value make_macro(const Stmt& s, Scope* closure) {
    return Value::callable(s.targets[0], [this, &s, closure](CallArgs& args) {
      if (call_depth_ >= kMaxCallDepth) eval_fail("macro calls nested deeper than {}", kMaxCallDepth);
      if (args.positional.size() > s.params.size()) {
        eval_fail("macro '{}' takes not more than {} argument(s)", s.targets[0], s.params.size());
      }
      Scope& frame = enter(closure, s.frame);
      std::vector<bool> given(s.params.size(), false);
      for (size_t i = 0; i < args.positional.size(); ++i) {
        frame.vars[s.params[i].name] = args.positional[i];
        given[i] = true;
      }
      for (const auto& [name, value] : args.keyword) {
        size_t i = 0;
        while (i < s.params.size() && s.params[i].name != name) ++i;
        if (i == s.params.size()) eval_fail("macro '{}' takes no keyword argument '{}'", s.targets[0], name);
        if (given[i]) eval_fail("macro '{}' got multiple values for argument '{}'", s.targets[0], name);
        frame.vars[name] = value;
        given[i] = true;
      }
      for (size_t i = 0; i < s.params.size(); ++i) {
        if (given[i]) continue;
        const Param& p = s.params[i];
        frame.vars[p.name] = p.default_value ? eval(*p.default_value, &frame)
                                             : Value::undefined(fmt::format("parameter '{}' was not provided", p.name));
      }
      std::string out;
      ++call_depth_;
      try {
        exec(s.body, &frame, out);
      } catch (...) {
        --call_depth_;
        throw;
      }
      --call_depth_;
      return Value(std::move(out));
    });
  }

  // ---- expressions ----

  Value eval(const Expr& e, Scope* scope) {
    try {
      return eval_inner(e, scope);
    } catch (const EvalError& err) {
      if (err.positioned()) throw;
      rethrow_at(err, e.pos);
    }
  }

  CallArgs eval_args(const Expr& e, size_t first, Scope* scope) {
    CallArgs args;
    for (size_t i = first; i < e.operands.size(); ++i) args.positional.push_back(eval(*e.operands[i], scope));
    for (const Keyword& kw : e.keywords) args.keyword.emplace_back(kw.name, eval(*kw.value, scope));
    return args;
  }

  // A filter chain whose innermost subject is missing (filter blocks, set blocks) applied to v.
  Value apply_filters(const Expr& filter, Value v, Scope* scope) {
    Value subject = filter.operands[0] ? apply_filters(*filter.operands[0], std::move(v), scope) : std::move(v);
    CallArgs args = eval_args(filter, 1, scope);
    return apply_filter(filter.name, subject, args);
  }

  Value eval_inner(const Expr& e, Scope* scope) {
    switch (e.kind) {
      case ExprKind::Const: return e.constant;
      case ExprKind::Name: return lookup(scope, e.name);
      case ExprKind::List:
      case ExprKind::Tuple: {
        std::vector<Value> items;
        for (const ExprPtr& item : e.operands) items.push_back(eval(*item, scope));
        return Value::list(std::move(items), e.kind == ExprKind::Tuple);
      }
      case ExprKind::Dict: {
        DictData d;
        for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
          const Value key = eval(*e.operands[i], scope);
          if (!key.is_string()) eval_fail("dict keys must be strings in chat templates, not {}", type_name(key));
          d.set(key.as_string(), eval(*e.operands[i + 1], scope));
        }
        return Value::dict(std::move(d));
      }
      case ExprKind::GetAttr: return get_attr(eval(*e.operands[0], scope), e.name);
      case ExprKind::GetItem: {
        const Value obj = eval(*e.operands[0], scope);
        const Expr& key = *e.operands[1];
        if (key.kind != ExprKind::Slice) return get_item(obj, eval(key, scope));
        auto bound = [&](size_t i) { return key.operands[i] ? eval(*key.operands[i], scope) : Value::none(); };
        return slice(obj, bound(0), bound(1), bound(2));
      }
      case ExprKind::Slice: eval_fail("a slice is only valid inside []");
      case ExprKind::Call: {
        const Value callee = eval(*e.operands[0], scope);
        CallArgs args = eval_args(e, 1, scope);
        return call(callee, args);
      }
      case ExprKind::Filter: {
        const Value subject = eval(*e.operands[0], scope);
        CallArgs args = eval_args(e, 1, scope);
        return apply_filter(e.name, subject, args);
      }
      case ExprKind::Test: {
        const Value subject = eval(*e.operands[0], scope);
        CallArgs args = eval_args(e, 1, scope);
        return Value(apply_test(e.name, subject, args) != e.negated);
      }
      case ExprKind::Unary: {
        const Value v = eval(*e.operands[0], scope);
        if (e.name == "not") return Value(!truthy(v));
        return e.name == "-" ? negate(v) : unary_plus(v);
      }
      case ExprKind::Binary: {
        Value left = eval(*e.operands[0], scope);
        if (e.name == "and") return truthy(left) ? eval(*e.operands[1], scope) : left;
        if (e.name == "or") return truthy(left) ? left : eval(*e.operands[1], scope);
        return binary_op(e.name, left, eval(*e.operands[1], scope));
      }
      case ExprKind::Concat: {
        std::string out;
        for (const ExprPtr& part : e.operands) out += to_str(eval(*part, scope));
        return Value(std::move(out));
      }
      case ExprKind::Compare: {
        Value left = eval(*e.operands[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.operands[i + 1], scope);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::CondExpr:
        if (truthy(eval(*e.operands[1], scope))) return eval(*e.operands[0], scope);
        if (e.operands[2]) return eval(*e.operands[2], scope);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    eval_fail("unknown expression");
  }

  static bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "<") return less(a, b);
    if (op == ">") return less(b, a);
    if (op == "<=") return less(a, b) || equals(a, b);
    if (op == ">=") return less(b, a) || equals(a, b);
    if (op == "in") return contains(b, a);
    return !contains(b, a);  // notin
  }

  std::deque<Scope> scopes_;  // every scope lives until the render ends: macros keep pointers
  std::unordered_map<std::string, Value> globals_;
  std::unordered_map<std::string, Value> exported_;  // top-level assignments so far
  int call_depth_ = 0;
};

}  // namespace

std::string render(const Template& tmpl, const DictData& globals) { return Renderer(globals).run(tmpl); }

}  // namespace fp4::chat::jinja
