#include "chat/jinja_ops.h"

#include <cmath>

#include "chat/jinja_error.h"
#include "chat/jinja_format.h"
#include "chat/jinja_methods.h"
#include "chat/jinja_strings.h"

namespace fp4::chat::jinja {

namespace {

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
}

// Python's slice.indices(): clamps a bound to the sequence, per the step's direction.
int64_t slice_bound(const Value& bound, int64_t len, int64_t step, bool is_start) {
  if (bound.is_none() || bound.is_undefined()) {
    if (step > 0) return is_start ? 0 : len;
    return is_start ? len - 1 : -1;
  }
  if (!bound.is_integral()) {
    eval_fail("slice indices must be integers or None, not {}", type_name(bound));
  }
  int64_t i = bound.as_int();
  if (i < 0) {
    i += len;
    if (i < 0) i = step < 0 ? -1 : 0;
  } else if (i >= len) {
    i = step < 0 ? len - 1 : len;
  }
  return i;
}

template <typename Seq>
Seq slice_seq(const Seq& seq, const Value& start, const Value& stop, const Value& step_v) {
  int64_t step = 1;
  if (!step_v.is_none() && !step_v.is_undefined()) {
    if (!step_v.is_integral()) eval_fail("slice indices must be integers or None, not {}", type_name(step_v));
    step = step_v.as_int();
    if (step == 0) eval_fail("slice step cannot be zero");
  }
  const auto len = static_cast<int64_t>(seq.size());
  const int64_t b = slice_bound(start, len, step, true);
  const int64_t e = slice_bound(stop, len, step, false);
  Seq out;
  if (step > 0) {
    for (int64_t i = b; i < e; i += step) out.push_back(seq[static_cast<size_t>(i)]);
  } else {
    for (int64_t i = b; i > e; i += step) out.push_back(seq[static_cast<size_t>(i)]);
  }
  return out;
}

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  eval_fail("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

// Python ints do not overflow; ours are 64-bit and say so instead of wrapping.
template <typename F>
int64_t checked(F op_with_overflow, int64_t a, int64_t b, std::string_view op) {
  int64_t r = 0;
  if (op_with_overflow(a, b, &r)) eval_fail("integer overflow in '{}'", op);
  return r;
}

bool add_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul_overflow(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

Value repeat(const Value& seq, int64_t times) {
  const int64_t n = std::max<int64_t>(times, 0);
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > kMaxStringBytes / s.size()) {
      eval_fail("string repetition of {} bytes x {} is too large", s.size(), n);
    }
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const ListData& l = seq.as_list();
  if (!l.items.empty() && static_cast<uint64_t>(n) > kMaxStringBytes / l.items.size()) {
    eval_fail("list repetition x {} is too large", n);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.items.begin(), l.items.end());
  return Value::list(std::move(out), l.tuple);
}

// Python's float %: the result takes the divisor's sign, a zero one included (2.0 % -1 is -0.0).
double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m == 0) return std::copysign(0.0, b);
  if ((m < 0) != (b < 0)) m += b;
  return m;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: fail_undefined(obj);
    case Value::Kind::Namespace: {
      const Value* v = obj.as_dict().find(name);
      return v ? *v : missing_attribute(obj, name);
    }
    case Value::Kind::Dict: {
      if (has_method(obj, name)) return bind_method(obj, name);
      const Value* v = obj.as_dict().find(name);
      return v ? *v : missing_attribute(obj, name);
    }
    default:
      if (has_method(obj, name)) return bind_method(obj, name);
      return missing_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: fail_undefined(obj);
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
      if (key.is_string()) {
        const Value* v = obj.as_dict().find(key.as_string());
        if (v) return *v;
      }
      break;
    case Value::Kind::List:
    case Value::Kind::String:
      if (key.is_integral() && !obj.is_view()) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
          const auto& items = obj.as_list().items;
          const auto n = static_cast<int64_t>(items.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
        } else {
          const std::u32string u = utf8_decode(obj.as_string());
          const auto n = static_cast<int64_t>(u.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return Value(utf8_encode(std::u32string_view(u).substr(static_cast<size_t>(i), 1)));
        }
        return Value::undefined(fmt::format("{} index {} out of range", type_name(obj), key.as_int()));
      }
      break;
    default: break;
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(fmt::format("'{} object' has no element {}", type_name(obj), repr(key)));
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_string()) {
    return Value(utf8_encode(slice_seq(utf8_decode(obj.as_string()), start, stop, step)));
  }
  if (obj.is_sequence_list()) {
    return Value::list(slice_seq(obj.as_list().items, start, stop, step), obj.as_list().tuple);
  }
  eval_fail("'{}' object is not subscriptable", type_name(obj));
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  const bool ints = a.is_integral() && b.is_integral();
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return Value(checked(add_overflow, a.as_int(), b.as_int(), op));
    if (nums) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > kMaxStringBytes) eval_fail("string too long");
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_sequence_list() && b.is_sequence_list() && a.as_list().tuple == b.as_list().tuple) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().tuple);
    }
    if (a.is_string() && b.kind() != Value::Kind::Undefined) {
      eval_fail("can only concatenate str (not \"{}\") to str", type_name(b));
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) return Value(checked(sub_overflow, a.as_int(), b.as_int(), op));
    if (nums) return Value(a.as_double() - b.as_double());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) return Value(checked(mul_overflow, a.as_int(), b.as_int(), op));
    if (nums) return Value(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_sequence_list()) && b.is_integral()) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_sequence_list()) && a.is_integral()) return repeat(b, a.as_int());
    unsupported(op, a, b);
  }
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  if (!nums) unsupported(op, a, b);
  if (op == "/") {
    if (b.as_double() == 0) eval_fail("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0) eval_fail("{}", op == "%" ? "modulo by zero" : "division by zero");
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (x == INT64_MIN && y == -1) eval_fail("integer overflow in '{}'", op);
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value(op == "//" ? q : m);
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "%") return Value(py_fmod(x, y));
    // CPython's float_floor_div: exact for every pair, unlike floor(x / y).
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
    if (div == 0) return Value(std::copysign(0.0, x / y));
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return Value(floordiv);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; --e) {
        result = checked(mul_overflow, result, base, op);
        if (result == 0 || result == 1) break;
      }
      return Value(result);
    }
    if (a.as_double() == 0 && b.as_double() < 0) eval_fail("0.0 cannot be raised to a negative power");
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  eval_fail("unknown operator '{}'", op);
}

Value negate(const Value& v) {
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) eval_fail("integer overflow in unary '-'");
    return Value(-v.as_int());
  }
  if (v.is_number()) return Value(-v.as_double());
  if (v.is_undefined()) fail_undefined(v);
  eval_fail("bad operand type for unary -: '{}'", type_name(v));
}

Value unary_plus(const Value& v) {
  if (v.is_integral()) return Value(v.as_int());
  if (v.is_number()) return v;
  if (v.is_undefined()) fail_undefined(v);
  eval_fail("bad operand type for unary +: '{}'", type_name(v));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string()) {
        eval_fail("'in <string>' requires string as left operand, not {}", type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const Value& v : container.as_list().items) {
        if (equals(v, item)) return true;
      }
      return false;
    case Value::Kind::Dict:
      if (item.is_list() && !item.as_list().tuple) eval_fail("unhashable type: '{}'", type_name(item));
      if (item.is_dict() || item.kind() == Value::Kind::Namespace) eval_fail("unhashable type: '{}'", type_name(item));
      return item.is_string() && container.as_dict().find(item.as_string());
    default: eval_fail("argument of type '{}' is not iterable", type_name(container));
  }
}

Value call(const Value& callee, CallArgs& args) {
  if (callee.kind() == Value::Kind::Callable) return callee.as_callable().fn(args);
  if (callee.is_undefined()) fail_undefined(callee);
  eval_fail("'{}' object is not callable", type_name(callee));
}

}  // namespace fp4::chat::jinja
