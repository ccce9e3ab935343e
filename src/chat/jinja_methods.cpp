#include "chat/jinja_methods.h"

#include <algorithm>
#include <array>

#include "chat/jinja_error.h"
#include "chat/jinja_strings.h"

namespace fp4::chat::jinja {

namespace {

constexpr std::array<std::string_view, 23> kStrMethods = {
    "strip",   "lstrip",  "rstrip",     "split",      "rsplit",  "splitlines", "startswith",
    "endswith", "upper",  "lower",      "title",      "capitalize", "replace", "find",
    "rfind",   "count",   "join",       "isdigit",    "isspace", "isalpha",    "islower",
    "isupper", "format"};
constexpr std::array<std::string_view, 4> kDictMethods = {"items", "keys", "values", "get"};
constexpr std::array<std::string_view, 2> kListMethods = {"index", "count"};

template <size_t N>
bool among(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::optional<std::string> optional_string(const BoundArgs& b, size_t i) {
  const Value* v = b.get(i);
  if (!v || v->is_none()) return std::nullopt;
  return b.string_at(i);
}

// startswith/endswith take a str or a tuple of str, and an optional [start, end) window.
bool affix_match(const std::string& s, const BoundArgs& b, bool prefix) {
  std::string window = s;
  if (b.has(1) || b.has(2)) {
    const std::u32string u = utf8_decode(s);
    const auto n = static_cast<int64_t>(u.size());
    auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(i + n, 0) : std::min(i, n); };
    const int64_t start = b.has(1) && !b.get(1)->is_none() ? clamp(b.int_at(1)) : 0;
    const int64_t end = b.has(2) && !b.get(2)->is_none() ? clamp(b.int_at(2)) : n;
    if (start > end) return false;
    window = utf8_encode(std::u32string_view(u).substr(static_cast<size_t>(start), static_cast<size_t>(end - start)));
  }
  auto one = [&](const std::string& a) {
    if (a.size() > window.size()) return false;
    return prefix ? window.compare(0, a.size(), a) == 0
                  : window.compare(window.size() - a.size(), a.size(), a) == 0;
  };
  const Value* affix = b.get(0);
  if (!affix) eval_fail("{}() takes at least 1 argument", prefix ? "startswith" : "endswith");
  if (affix->is_string()) return one(affix->as_string());
  if (affix->is_list() && affix->as_list().tuple) {
    for (const Value& v : affix->as_list().items) {
      if (!v.is_string()) eval_fail("tuple for startswith/endswith must only contain str");
      if (one(v.as_string())) return true;
    }
    return false;
  }
  eval_fail("{} first arg must be str or a tuple of str, not {}",
            prefix ? "startswith" : "endswith", type_name(*affix));
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (char32_t c : utf8_decode(s)) {
    if (!pred(c)) return false;
  }
  return true;
}

// islower/isupper: at least one cased character, and no cased character of the other case.
bool cased_only(const std::string& s, bool lower) {
  bool any = false;
  for (char32_t c : utf8_decode(s)) {
    if (!py_iscased(c)) continue;
    const bool is_lower = py_toupper(c) != c;
    const bool is_upper = py_tolower(c) != c;
    if (lower ? is_upper : is_lower) return false;
    if (lower ? is_lower : is_upper) any = true;
  }
  return any;
}

Value str_method(const std::string& s, const std::string& name, CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    BoundArgs b(name, args, {"chars"});
    return Value(py_strip(s, optional_string(b, 0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    BoundArgs b(name, args, {"sep", "maxsplit"});
    const auto sep = optional_string(b, 0);
    if (sep && sep->empty()) eval_fail("empty separator");
    const int64_t maxsplit = b.has(1) ? b.int_at(1) : -1;
    std::vector<Value> parts;
    for (auto& p : py_split(s, sep, maxsplit, name == "rsplit")) parts.emplace_back(std::move(p));
    return Value::list(std::move(parts));
  }
  if (name == "splitlines") {
    BoundArgs b(name, args, {"keepends"});
    std::vector<Value> parts;
    for (auto& p : py_splitlines(s, truthy(b.get_or(0, Value(false))))) parts.emplace_back(std::move(p));
    return Value::list(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") {
    BoundArgs b(name, args, {"prefix", "start", "end"});
    return Value(affix_match(s, b, name == "startswith"));
  }
  if (name == "replace") {
    BoundArgs b(name, args, {"old", "new", "count"});
    return Value(py_replace(s, b.string_at(0), b.string_at(1), b.has(2) ? b.int_at(2) : -1));
  }
  if (name == "find" || name == "rfind") {
    BoundArgs b(name, args, {"sub"});
    return Value(py_find(s, b.string_at(0), name == "rfind"));
  }
  if (name == "count") {
    BoundArgs b(name, args, {"sub"});
    return Value(py_count(s, b.string_at(0)));
  }
  if (name == "join") {
    BoundArgs b(name, args, {"iterable"});
    if (!b.has(0)) eval_fail("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(*b.get(0))) {
      if (!item.is_string()) eval_fail("sequence item: expected str instance, {} found", type_name(item));
      if (!first) out += s;
      first = false;
      out += item.as_string();
    }
    return Value(std::move(out));
  }
  if (name == "format") eval_fail("str.format() is not supported in chat templates");
  BoundArgs b(name, args, {});
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "isdigit") return Value(all_chars(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isspace") return Value(all_chars(s, py_isspace));
  if (name == "isalpha") return Value(all_chars(s, py_iscased));
  if (name == "islower") return Value(cased_only(s, true));
  if (name == "isupper") return Value(cased_only(s, false));
  eval_fail("str has no method '{}'", name);
}

Value dict_method(const DictData& d, const std::string& name, CallArgs& args) {
  if (name == "get") {
    BoundArgs b(name, args, {"key", "default"});
    if (!b.has(0)) eval_fail("get expected at least 1 argument, got 0");
    if (b.get(0)->is_string()) {
      if (const Value* v = d.find(b.get(0)->as_string())) return *v;
    }
    return b.get_or(1, Value::none());
  }
  BoundArgs b(name, args, {});
  std::vector<Value> out;
  for (const auto& [k, v] : d.entries()) {
    if (name == "items") out.push_back(Value::list({Value(k), v}, true));
    else if (name == "keys") out.emplace_back(k);
    else out.push_back(v);
  }
  return Value::list(std::move(out), false,
                     name == "items" ? "dict_items" : name == "keys" ? "dict_keys" : "dict_values");
}

Value list_method(const ListData& l, const std::string& name, CallArgs& args) {
  BoundArgs b(name, args, {"value"});
  if (!b.has(0)) eval_fail("{}() takes exactly one argument (0 given)", name);
  int64_t count = 0;
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (!equals(l.items[i], *b.get(0))) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") eval_fail("{} is not in list", repr(*b.get(0)));
  return Value(count);
}

}  // namespace

bool has_method(const Value& self, std::string_view name) {
  switch (self.kind()) {
    case Value::Kind::String: return among(kStrMethods, name);
    case Value::Kind::Dict: return among(kDictMethods, name);
    case Value::Kind::List: return among(kListMethods, name);
    default: return false;
  }
}

Value bind_method(const Value& self, const std::string& name) {
  return Value::callable(type_name(self) + "." + name, [self, name](CallArgs& args) {
    switch (self.kind()) {
      case Value::Kind::String: return str_method(self.as_string(), name, args);
      case Value::Kind::Dict: return dict_method(self.as_dict(), name, args);
      default: return list_method(self.as_list(), name, args);
    }
  });
}

}  // namespace fp4::chat::jinja
