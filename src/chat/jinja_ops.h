// What Jinja's expressions do to values: attribute and item access (with Jinja's fallbacks
// between the two), slicing, arithmetic, `in`, calls, and the str/dict/list methods that chat
// templates call. Every failure is an EvalError worded like Python's.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "chat/jinja_value.h"

namespace fp4::chat::jinja {

// obj.name: a method of str/dict/list first, then the item `name`; missing gives Undefined.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: the item first, then (for a string key) the attribute; missing gives Undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on a list, tuple or str; each bound is None/Undefined when omitted.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// op is one of + - * / // % **.
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value negate(const Value& v);
Value unary_plus(const Value& v);
// `item in container`.
bool contains(const Value& container, const Value& item);
Value call(const Value& callee, CallArgs& args);

// Results longer than this are refused ('x' * 10**12 would otherwise exhaust memory).
inline constexpr size_t kMaxStringBytes = size_t{1} << 28;

}  // namespace fp4::chat::jinja
