// The values a chat template computes with: Python's None, bool, int, float, str, list/tuple,
// dict, plus Jinja's Undefined, namespace() objects and callables. Lists and dicts are shared
// and immutable (Jinja's sandbox forbids mutating them); a namespace is the one mutable object,
// shared by reference as in Python. Dicts keep insertion order, as Python's do.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace fp4::chat::jinja {

class Value;

struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b) instead of [a, b]; otherwise a list
  // A dict view (dict.keys(), .values(), .items()) prints as "dict_keys([...])"; null for lists.
  const char* view = nullptr;
};

class DictData {
 public:
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);  // replaces in place, or appends
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<Value(CallArgs&)>;

struct CallableData {
  std::string name;
  NativeFunction fn;
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

  Value() = default;  // Undefined
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}

  // `hint` says why the value is undefined ("'foo' is undefined"), for the error raised when
  // the template then uses it as an object.
  static Value undefined(std::string hint);
  static Value none();
  static Value list(std::vector<Value> items, bool tuple = false, const char* view = nullptr);
  static Value dict(DictData data);
  static Value make_namespace(DictData data);
  static Value callable(std::string name, NativeFunction fn);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_view() const { return is_list() && as_list().view; }
  // A list or tuple proper: indexable, sliceable, concatenable (a dict view is none of these).
  bool is_sequence_list() const { return is_list() && !as_list().view; }
  // bool is a number, as in Python.
  bool is_number() const {
    return kind() == Kind::Bool || kind() == Kind::Int || kind() == Kind::Float;
  }
  bool is_integral() const { return kind() == Kind::Bool || kind() == Kind::Int; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;  // Bool or Int
  double as_double() const;  // any number
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(v_); }
  const DictData& as_dict() const;  // Dict or Namespace
  DictData& namespace_data() const { return *std::get<NamespaceRef>(v_).data; }
  const CallableData& as_callable() const {
    return *std::get<std::shared_ptr<const CallableData>>(v_);
  }
  const std::string& undefined_hint() const { return std::get<UndefinedData>(v_).hint; }

 private:
  struct UndefinedData {
    std::string hint;
  };
  struct NoneData {};
  struct NamespaceRef {
    std::shared_ptr<DictData> data;
  };
  // The order matches Kind.
  std::variant<UndefinedData, NoneData, bool, int64_t, double, std::string,
               std::shared_ptr<const ListData>, std::shared_ptr<const DictData>, NamespaceRef,
               std::shared_ptr<const CallableData>>
      v_;
};

// Python's semantics for the basic protocols.
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str(v); Undefined prints as ""
std::string repr(const Value& v);
bool equals(const Value& a, const Value& b);
// a < b as Python orders numbers, strings and lists; anything else is an EvalError.
bool less(const Value& a, const Value& b);
std::string type_name(const Value& v);  // 'str', 'int', 'dict object', ...
int64_t length(const Value& v);         // len(v); Undefined has length 0
// The items iteration yields: list items, dict keys, string characters; Undefined is empty.
std::vector<Value> iterate(const Value& v);
// Raises the error for using `v` (which is Undefined) as an object.
[[noreturn]] void fail_undefined(const Value& v);

// Positional and keyword arguments bound to a function's parameters, Python style.
class BoundArgs {
 public:
  BoundArgs(std::string_view function, CallArgs& args, std::vector<std::string_view> params);
  const Value* get(size_t index) const { return slots_[index]; }
  bool has(size_t index) const { return slots_[index] != nullptr; }
  Value get_or(size_t index, Value fallback) const;
  // The argument as a string / int, or an EvalError naming the function and the parameter.
  std::string string_at(size_t index) const;
  int64_t int_at(size_t index) const;

 private:
  std::string function_;
  std::vector<std::string_view> params_;
  std::vector<const Value*> slots_;
};

}  // namespace fp4::chat::jinja
