#include "chat/jinja_symbols.h"

#include <functional>
#include <map>
#include <set>

namespace fp4::chat::jinja {

namespace {

// One frame's symbol table: jinja2.idtracking.Symbols, keyed by name (Jinja's per-frame
// identifiers l_<level>_<name> are one per name and frame).
class Symbols {
 public:
  explicit Symbols(const Symbols* parent) : parent_(parent) {}

  bool find_ref(const std::string& name) const {
    for (const Symbols* s = this; s; s = s->parent_) {
      if (s->loads_.count(name)) return true;
    }
    return false;
  }

  void store(const std::string& name) {
    stores_.insert(name);
    if (loads_.count(name)) return;
    define(name, parent_ && parent_->find_ref(name) ? LoadKind::Alias : LoadKind::Undefined);
  }

  void declare_parameter(const std::string& name) {
    stores_.insert(name);
    define(name, LoadKind::Param);
  }

  void load(const std::string& name) {
    if (!find_ref(name)) define(name, LoadKind::Resolve);
  }

  // After an if: every branch's names become the frame's, and a name first assigned inside a
  // branch (which may not run) is read from outside when the frame is entered.
  void branch_update(const std::vector<Symbols>& branches) {
    std::set<std::string> stored_in_branches;
    for (const Symbols& b : branches) stored_in_branches.insert(b.stores_.begin(), b.stores_.end());
    for (const std::string& name : stores_) stored_in_branches.erase(name);
    for (const Symbols& b : branches) {
      for (const std::string& name : b.order_) define(name, b.loads_.at(name));
      stores_.insert(b.stores_.begin(), b.stores_.end());
    }
    for (const std::string& name : stored_in_branches) {
      loads_[name] = parent_ && parent_->find_ref(name) ? LoadKind::Alias : LoadKind::Resolve;
    }
  }

  FrameSymbols result() const {
    FrameSymbols out;
    for (const std::string& name : order_) out.loads.emplace_back(name, loads_.at(name));
    return out;
  }

 private:
  void define(const std::string& name, LoadKind kind) {
    if (!loads_.count(name)) order_.push_back(name);
    loads_[name] = kind;
  }

  const Symbols* parent_;
  std::map<std::string, LoadKind> loads_;  // the frame's own names
  std::vector<std::string> order_;         // loads_ in definition order
  std::set<std::string> stores_;
};

// jinja2.idtracking.FrameSymbolVisitor: walks one frame's statements, not into the frames they
// open (collected in `nested` for later, once this frame's names are all known).
class FrameVisitor {
 public:
  FrameVisitor(Symbols& symbols, std::vector<Stmt*>& nested) : sym_(&symbols), nested_(nested) {}

  void expr(const Expr* e) {
    if (!e) return;
    if (e->kind == ExprKind::Name) sym_->load(e->name);
    for (const ExprPtr& operand : e->operands) expr(operand.get());
    for (const Keyword& kw : e->keywords) expr(kw.value.get());
  }

  void body(const Body& statements) {
    for (const StmtPtr& s : statements) stmt(*s);
  }

  void stmt(Stmt& s) {
    switch (s.kind) {
      case StmtKind::Text:
      case StmtKind::Break:
      case StmtKind::Continue: break;
      case StmtKind::Print: expr(s.expr.get()); break;
      case StmtKind::If: visit_if(s.branches, 0, s.else_body); break;
      case StmtKind::For:
        expr(s.expr.get());
        nested_.push_back(&s);
        break;
      case StmtKind::Set:
        expr(s.expr.get());
        if (!s.ns_attr.empty()) {
          sym_->load(s.targets[0]);
        } else {
          for (const std::string& t : s.targets) sym_->store(t);
        }
        break;
      case StmtKind::SetBlock:
      case StmtKind::Macro:
        sym_->store(s.targets[0]);
        nested_.push_back(&s);
        break;
      case StmtKind::Scope:
        for (const Param& p : s.params) expr(p.default_value.get());
        nested_.push_back(&s);
        break;
      case StmtKind::FilterBlock:
        expr(s.filter.get());
        nested_.push_back(&s);
        break;
    }
  }

 private:
  // Jinja's If node holds its elifs as If nodes with empty else branches; branches[first] is
  // this node's test and body.
  void visit_if(std::vector<Branch>& branches, size_t first, const Body& else_body) {
    expr(branches[first].condition.get());
    Symbols* original = sym_;
    auto visit_copy = [&](const std::function<void()>& visit) {
      Symbols copy = *original;
      sym_ = &copy;
      visit();
      sym_ = original;
      return copy;
    };
    std::vector<Symbols> outcomes;
    outcomes.push_back(visit_copy([&] { body(branches[first].body); }));
    outcomes.push_back(visit_copy([&] {
      if (first == 0) {
        for (size_t i = 1; i < branches.size(); ++i) visit_if(branches, i, Body());
      }
    }));
    outcomes.push_back(visit_copy([&] { body(else_body); }));
    original->branch_update(outcomes);
  }

  Symbols* sym_;
  std::vector<Stmt*>& nested_;
};

void analyze_nested(Stmt& s, const Symbols& parent);

FrameSymbols analyze_frame(const Symbols* parent, const std::function<void(Symbols&, FrameVisitor&)>& fill) {
  Symbols sym(parent);
  std::vector<Stmt*> nested;
  FrameVisitor visitor(sym, nested);
  fill(sym, visitor);
  for (Stmt* n : nested) analyze_nested(*n, sym);
  return sym.result();
}

// jinja2.idtracking.RootVisitor for each kind of frame.
void analyze_nested(Stmt& s, const Symbols& parent) {
  switch (s.kind) {
    case StmtKind::For:
      s.frame = analyze_frame(&parent, [&](Symbols& sym, FrameVisitor& v) {
        sym.declare_parameter("loop");
        for (const std::string& t : s.targets) sym.declare_parameter(t);
        v.body(s.body);
      });
      s.else_frame = analyze_frame(&parent, [&](Symbols&, FrameVisitor& v) { v.body(s.else_body); });
      if (s.filter) {
        s.test_frame = analyze_frame(&parent, [&](Symbols& sym, FrameVisitor& v) {
          for (const std::string& t : s.targets) sym.declare_parameter(t);
          v.expr(s.filter.get());
        });
      }
      break;
    case StmtKind::Macro:
      s.frame = analyze_frame(&parent, [&](Symbols& sym, FrameVisitor& v) {
        for (const Param& p : s.params) sym.declare_parameter(p.name);
        for (const Param& p : s.params) v.expr(p.default_value.get());
        v.body(s.body);
      });
      break;
    case StmtKind::Scope:
      s.frame = analyze_frame(&parent, [&](Symbols& sym, FrameVisitor& v) {
        for (const Param& p : s.params) sym.declare_parameter(p.name);
        v.body(s.body);
      });
      break;
    case StmtKind::SetBlock:
    case StmtKind::FilterBlock:
      s.frame = analyze_frame(&parent, [&](Symbols&, FrameVisitor& v) {
        v.body(s.body);
        v.expr(s.filter.get());
      });
      break;
    default: break;
  }
}

}  // namespace

void analyze_frames(Template& t) {
  t.frame = analyze_frame(nullptr, [&](Symbols&, FrameVisitor& v) { v.body(t.body); });
}

}  // namespace fp4::chat::jinja
