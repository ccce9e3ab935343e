#include "chat/jinja_value.h"

#include <cmath>

#include "chat/jinja_error.h"
#include "chat/jinja_strings.h"

namespace fp4::chat::jinja {

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void DictData::set(std::string key, Value value) {
  for (auto& [k, v] : entries_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.v_ = UndefinedData{std::move(hint)};
  return v;
}

Value Value::none() {
  Value v;
  v.v_ = NoneData{};
  return v;
}

Value Value::list(std::vector<Value> items, bool tuple, const char* view) {
  Value v;
  v.v_ = std::make_shared<const ListData>(ListData{std::move(items), tuple, view});
  return v;
}

Value Value::dict(DictData data) {
  Value v;
  v.v_ = std::shared_ptr<const DictData>(std::make_shared<DictData>(std::move(data)));
  return v;
}

Value Value::make_namespace(DictData data) {
  Value v;
  v.v_ = NamespaceRef{std::make_shared<DictData>(std::move(data))};
  return v;
}

Value Value::callable(std::string name, NativeFunction fn) {
  Value v;
  v.v_ = std::make_shared<const CallableData>(CallableData{std::move(name), std::move(fn)});
  return v;
}

int64_t Value::as_int() const {
  if (kind() == Kind::Bool) return as_bool() ? 1 : 0;
  return std::get<int64_t>(v_);
}

double Value::as_double() const {
  if (kind() == Kind::Float) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

const DictData& Value::as_dict() const {
  if (kind() == Kind::Namespace) return *std::get<NamespaceRef>(v_).data;
  return *std::get<std::shared_ptr<const DictData>>(v_);
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_double() != 0.0;
    case Value::Kind::String: return !v.as_string().empty();
    case Value::Kind::List: return !v.as_list().items.empty();
    case Value::Kind::Dict: return v.as_dict().size() != 0;
    case Value::Kind::Namespace:
    case Value::Kind::Callable: return true;
  }
  return false;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::String: return v.as_string();
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return py_float_repr(v.as_double());
    case Value::Kind::String: return py_repr(v.as_string());
    case Value::Kind::List: {
      const ListData& l = v.as_list();
      std::string out(1, l.tuple ? '(' : '[');
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += repr(l.items[i]);
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      out += l.tuple ? ')' : ']';
      return l.view ? std::string(l.view) + "(" + out + ")" : out;
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      std::string out = v.kind() == Value::Kind::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, item] : v.as_dict().entries()) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(k) + ": " + repr(item);
      }
      return out + (v.kind() == Value::Kind::Namespace ? "}>" : "}");
    }
    case Value::Kind::Callable: return "<function " + v.as_callable().name + ">";
  }
  return "";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::Dict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, item] : x.entries()) {
        const Value* other = y.find(k);
        if (!other || !equals(item, *other)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace: return &a.namespace_data() == &b.namespace_data();
    case Value::Kind::Callable: return &a.as_callable() == &b.as_callable();
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // code point order
  if (a.is_sequence_list() && b.is_sequence_list() && a.as_list().tuple == b.as_list().tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  eval_fail("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.as_list().view ? v.as_list().view : v.as_list().tuple ? "tuple" : "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Callable: return "function";
  }
  return "object";
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return static_cast<int64_t>(utf8_length(v.as_string()));
    case Value::Kind::List: return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.as_dict().size());
    default: eval_fail("object of type '{}' has no len()", type_name(v));
  }
}

std::vector<Value> iterate(const Value& v) {
  std::vector<Value> out;
  switch (v.kind()) {
    case Value::Kind::Undefined: return out;
    case Value::Kind::List: return v.as_list().items;
    case Value::Kind::Dict:
      for (const auto& entry : v.as_dict().entries()) out.emplace_back(entry.first);
      return out;
    case Value::Kind::String: {
      for (char32_t c : utf8_decode(v.as_string())) {
        std::string s;
        utf8_append(s, c);
        out.emplace_back(std::move(s));
      }
      return out;
    }
    default: eval_fail("'{}' object is not iterable", type_name(v));
  }
}

void fail_undefined(const Value& v) {
  const std::string& hint = v.undefined_hint();
  throw EvalError(hint.empty() ? "undefined value used as an object" : hint);
}

BoundArgs::BoundArgs(std::string_view function, CallArgs& args,
                     std::vector<std::string_view> params)
    : function_(function), params_(std::move(params)), slots_(params_.size(), nullptr) {
  if (args.positional.size() > params_.size()) {
    eval_fail("{}() takes at most {} argument(s), {} given", function_, params_.size(),
              args.positional.size());
  }
  for (size_t i = 0; i < args.positional.size(); ++i) slots_[i] = &args.positional[i];
  for (const auto& [name, value] : args.keyword) {
    size_t i = 0;
    while (i < params_.size() && params_[i] != name) ++i;
    if (i == params_.size()) eval_fail("{}() got an unexpected keyword argument '{}'", function_, name);
    if (slots_[i]) eval_fail("{}() got multiple values for argument '{}'", function_, name);
    slots_[i] = &value;
  }
}

Value BoundArgs::get_or(size_t index, Value fallback) const {
  return slots_[index] ? *slots_[index] : std::move(fallback);
}

std::string BoundArgs::string_at(size_t index) const {
  const Value* v = slots_[index];
  if (!v) eval_fail("{}() missing required argument '{}'", function_, params_[index]);
  if (!v->is_string()) {
    eval_fail("{}(): argument '{}' must be str, not {}", function_, params_[index], type_name(*v));
  }
  return v->as_string();
}

int64_t BoundArgs::int_at(size_t index) const {
  const Value* v = slots_[index];
  if (!v) eval_fail("{}() missing required argument '{}'", function_, params_[index]);
  if (!v->is_integral()) {
    eval_fail("{}(): argument '{}' must be int, not {}", function_, params_[index], type_name(*v));
  }
  return v->as_int();
}

}  // namespace fp4::chat::jinja
