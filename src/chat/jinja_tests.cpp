// Jinja's built-in tests (`x is defined`, `x is divisibleby 3`), as jinja2/tests.py defines them.
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_error.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_strings.h"

namespace fp4::chat::jinja {

namespace {

using Test = bool (*)(const Value&, CallArgs&);

const Value& other(CallArgs& a, std::string_view test) {
  BoundArgs b(test, a, {"other"});
  if (!b.has(0)) eval_fail("test '{}' needs an argument", test);
  return *b.get(0);
}

template <bool (*Pred)(const Value&)>
bool unary(const Value& v, CallArgs& a) {
  BoundArgs b("test", a, {});
  return Pred(v);
}

bool is_defined(const Value& v) { return !v.is_undefined(); }
bool is_undefined(const Value& v) { return v.is_undefined(); }
bool is_none(const Value& v) { return v.is_none(); }
bool is_boolean(const Value& v) { return v.kind() == Value::Kind::Bool; }
bool is_false(const Value& v) { return v.kind() == Value::Kind::Bool && !v.as_bool(); }
bool is_true(const Value& v) { return v.kind() == Value::Kind::Bool && v.as_bool(); }
bool is_integer(const Value& v) { return v.kind() == Value::Kind::Int; }
bool is_float(const Value& v) { return v.kind() == Value::Kind::Float; }
bool is_number(const Value& v) { return v.is_number(); }
bool is_string(const Value& v) { return v.is_string(); }
bool is_mapping(const Value& v) { return v.is_dict(); }
bool is_callable(const Value& v) { return v.kind() == Value::Kind::Callable; }
bool is_escaped(const Value&) { return false; }
// Undefined has __len__ and __getitem__ and __iter__ in Jinja, so it is a sequence and iterable.
bool is_sequence(const Value& v) {
  return v.is_string() || v.is_sequence_list() || v.is_dict() || v.is_undefined();
}
bool is_iterable(const Value& v) { return is_sequence(v) || v.is_view(); }
bool is_lower(const Value& v) {
  CallArgs none;
  return truthy(call(get_attr(Value(to_str(v)), "islower"), none));
}
bool is_upper(const Value& v) {
  CallArgs none;
  return truthy(call(get_attr(Value(to_str(v)), "isupper"), none));
}

bool remainder_is(const Value& v, const Value& divisor, int64_t r) {
  return equals(binary_op("%", v, divisor), Value(r));
}
bool t_odd(const Value& v, CallArgs& a) {
  BoundArgs b("odd", a, {});
  return remainder_is(v, Value(2), 1);
}
bool t_even(const Value& v, CallArgs& a) {
  BoundArgs b("even", a, {});
  return remainder_is(v, Value(2), 0);
}
bool t_divisibleby(const Value& v, CallArgs& a) { return remainder_is(v, other(a, "divisibleby"), 0); }
bool t_eq(const Value& v, CallArgs& a) { return equals(v, other(a, "eq")); }
bool t_ne(const Value& v, CallArgs& a) { return !equals(v, other(a, "ne")); }
bool t_lt(const Value& v, CallArgs& a) { return less(v, other(a, "lt")); }
bool t_gt(const Value& v, CallArgs& a) { return less(other(a, "gt"), v); }
bool t_le(const Value& v, CallArgs& a) { return !less(other(a, "le"), v); }
bool t_ge(const Value& v, CallArgs& a) { return !less(v, other(a, "ge")); }
bool t_in(const Value& v, CallArgs& a) { return contains(other(a, "in"), v); }
bool t_sameas(const Value& v, CallArgs& a) {
  // Python identity: None, True and False are singletons; other values are compared as objects.
  const Value& o = other(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.kind() == Value::Kind::Bool) return v.as_bool() == o.as_bool();
  if (v.is_list()) return &v.as_list() == &o.as_list();
  if (v.is_dict() || v.kind() == Value::Kind::Namespace) return &v.as_dict() == &o.as_dict();
  return false;
}
bool t_filter(const Value& v, CallArgs& a) {
  BoundArgs b("filter", a, {});
  return v.is_string() && check_filter_name(v.as_string()).empty();
}
bool t_test(const Value& v, CallArgs& a) {
  BoundArgs b("test", a, {});
  return v.is_string() && check_test_name(v.as_string()).empty();
}

const std::unordered_map<std::string_view, Test>& tests() {
  static const std::unordered_map<std::string_view, Test> table = {
      {"defined", unary<is_defined>},   {"undefined", unary<is_undefined>},
      {"none", unary<is_none>},         {"boolean", unary<is_boolean>},
      {"false", unary<is_false>},       {"true", unary<is_true>},
      {"integer", unary<is_integer>},   {"float", unary<is_float>},
      {"number", unary<is_number>},     {"string", unary<is_string>},
      {"mapping", unary<is_mapping>},   {"sequence", unary<is_sequence>},
      {"iterable", unary<is_iterable>}, {"callable", unary<is_callable>},
      {"escaped", unary<is_escaped>},   {"lower", unary<is_lower>},
      {"upper", unary<is_upper>},       {"odd", t_odd},
      {"even", t_even},                 {"divisibleby", t_divisibleby},
      {"eq", t_eq},                     {"equalto", t_eq},
      {"==", t_eq},                     {"ne", t_ne},
      {"!=", t_ne},                     {"lt", t_lt},
      {"lessthan", t_lt},               {"<", t_lt},
      {"gt", t_gt},                     {"greaterthan", t_gt},
      {">", t_gt},                      {"le", t_le},
      {"<=", t_le},                     {"ge", t_ge},
      {">=", t_ge},                     {"in", t_in},
      {"sameas", t_sameas},             {"filter", t_filter},
      {"test", t_test},
  };
  return table;
}

}  // namespace

std::string check_test_name(std::string_view name) {
  if (tests().count(name)) return "";
  return fmt::format("no test named '{}'", name);
}

bool apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) throw EvalError(check_test_name(name));
  return it->second(subject, args);
}

}  // namespace fp4::chat::jinja
