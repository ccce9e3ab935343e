// Jinja's built-in filters, each as jinja2/filters.py defines it with autoescape off (the
// setting transformers uses), and transformers' tojson.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_map>

#include "chat/jinja_builtins.h"
#include "chat/jinja_error.h"
#include "chat/jinja_format.h"
#include "chat/jinja_json.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_strings.h"

namespace fp4::chat::jinja {

namespace {

using Filter = Value (*)(const Value&, CallArgs&);

Value ignore_case(Value v) {
  if (v.is_string()) return Value(py_lower(v.as_string()));
  return v;
}

// The key of sort/unique/min/max: the attribute path (or the item), lowercased unless asked not.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value key = attribute.is_none() || attribute.is_undefined() ? item : lookup_path(item, attribute);
  return case_sensitive ? key : ignore_case(std::move(key));
}

std::vector<Value> sorted(std::vector<Value> items, const Value& attribute, bool case_sensitive,
                          bool reverse) {
  // An attribute list "a,b" sorts by a then b.
  std::vector<Value> paths;
  if (attribute.is_string()) {
    for (auto& p : py_split(attribute.as_string(), std::string(","), -1)) paths.emplace_back(std::move(p));
  } else {
    paths.push_back(attribute);
  }
  auto key = [&](const Value& item) {
    std::vector<Value> k;
    for (const Value& p : paths) k.push_back(sort_key(item, p, case_sensitive));
    return Value::list(std::move(k));
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(key(item), std::move(item));
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

// Python's int()/float() of a string: surrounding whitespace and '_' between digits allowed.
std::optional<int64_t> parse_int(std::string text, int64_t base) {
  text = py_strip(text, std::nullopt, true, true);
  std::string digits;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '_' && i > 0 && i + 1 < text.size() && std::isalnum(static_cast<unsigned char>(text[i - 1])) &&
        std::isalnum(static_cast<unsigned char>(text[i + 1]))) {
      continue;
    }
    digits.push_back(text[i]);
  }
  if (digits.empty()) return std::nullopt;
  size_t pos = 0;
  bool negative = false;
  if (digits[0] == '+' || digits[0] == '-') {
    negative = digits[0] == '-';
    pos = 1;
  }
  if (base == 16 || base == 8 || base == 2) {
    const char prefix = base == 16 ? 'x' : base == 8 ? 'o' : 'b';
    if (digits.size() > pos + 1 && digits[pos] == '0' && std::tolower(digits[pos + 1]) == prefix) pos += 2;
  }
  if (pos == digits.size()) return std::nullopt;
  int64_t v = 0;
  for (; pos < digits.size(); ++pos) {
    const char c = static_cast<char>(std::tolower(digits[pos]));
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return std::nullopt;
  }
  return negative ? -v : v;
}

std::optional<double> parse_float(const std::string& text) {
  std::string t = py_strip(text, std::nullopt, true, true);
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  if (t.empty()) return std::nullopt;
  std::string lower = py_lower(t);
  const std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  const double sign = lower[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * HUGE_VAL;
  if (body == "nan") return std::nan("");
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

Value f_abs(const Value& v, CallArgs& a) {
  BoundArgs b("abs", a, {});
  if (v.is_integral()) return v.as_int() < 0 ? negate(v) : Value(v.as_int());
  if (v.is_number()) return Value(std::fabs(v.as_double()));
  eval_fail("bad operand type for abs(): '{}'", type_name(v));
}

Value f_capitalize(const Value& v, CallArgs& a) {
  BoundArgs b("capitalize", a, {});
  return Value(py_capitalize(to_str(v)));
}

Value f_default(const Value& v, CallArgs& a) {
  BoundArgs b("default", a, {"default_value", "boolean"});
  if (v.is_undefined() || (truthy(b.get_or(1, Value(false))) && !truthy(v))) {
    return b.get_or(0, Value(""));
  }
  return v;
}

Value f_dictsort(const Value& v, CallArgs& a) {
  BoundArgs b("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) eval_fail("You can only sort by either \"key\" or \"value\" of a dict, not {}", type_name(v));
  const std::string by = b.has(1) ? b.string_at(1) : "key";
  if (by != "key" && by != "value") eval_fail("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items;
  for (const auto& [k, item] : v.as_dict().entries()) items.push_back(Value::list({Value(k), item}, true));
  return Value::list(sorted(std::move(items), Value(by == "key" ? int64_t{0} : int64_t{1}),
                            truthy(b.get_or(0, Value(false))), truthy(b.get_or(2, Value(false)))));
}

Value f_escape(const Value& v, CallArgs& a) {
  BoundArgs b("escape", a, {});
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value(std::move(out));
}

Value f_first(const Value& v, CallArgs& a) {
  BoundArgs b("first", a, {});
  const std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, CallArgs& a) {
  BoundArgs b("last", a, {});
  const std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_float(const Value& v, CallArgs& a) {
  BoundArgs b("float", a, {"default"});
  if (v.is_undefined()) fail_undefined(v);  // Undefined's __float__ raises
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value(*d);
  }
  return b.get_or(0, Value(0.0));
}

Value f_format(const Value& v, CallArgs& a) {
  if (!a.positional.empty() && !a.keyword.empty()) {
    eval_fail("can't handle positional and keyword arguments at the same time");
  }
  if (a.keyword.empty()) return Value(percent_format(to_str(v), Value::list(a.positional, true)));
  DictData d;
  for (const auto& [k, value] : a.keyword) d.set(k, value);
  return Value(percent_format(to_str(v), Value::dict(std::move(d))));
}

Value f_indent(const Value& v, CallArgs& a) {
  BoundArgs b("indent", a, {"width", "first", "blank"});
  const Value width = b.get_or(0, Value(4));
  std::string indention;
  if (width.is_string()) indention = width.as_string();
  else if (width.is_integral()) indention.assign(static_cast<size_t>(std::max<int64_t>(width.as_int(), 0)), ' ');
  else eval_fail("indent(): width must be an int or a str, not {}", type_name(width));
  const std::vector<std::string> lines = py_splitlines(to_str(v) + "\n", false);
  std::string out;
  const bool blank = truthy(b.get_or(2, Value(false)));
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i && (blank || !lines[i].empty())) out += indention;
    out += lines[i];
  }
  if (truthy(b.get_or(1, Value(false)))) out = indention + out;
  return Value(std::move(out));
}

Value f_int(const Value& v, CallArgs& a) {
  BoundArgs b("int", a, {"default", "base"});
  const int64_t base = b.has(1) ? b.int_at(1) : 10;
  if (v.is_undefined()) fail_undefined(v);  // Undefined's __int__ raises
  if (v.is_integral()) return Value(v.as_int());
  if (v.kind() == Value::Kind::Float) {
    const double d = v.as_double();
    if (std::isfinite(d) && std::fabs(d) < 9.2e18) return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value(*i);
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) {
      return Value(static_cast<int64_t>(*d));
    }
  }
  return b.get_or(0, Value(0));
}

Value f_items(const Value& v, CallArgs& a) {
  BoundArgs b("items", a, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) eval_fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, item] : v.as_dict().entries()) out.push_back(Value::list({Value(k), item}, true));
  return Value::list(std::move(out));
}

Value f_join(const Value& v, CallArgs& a) {
  BoundArgs b("join", a, {"d", "attribute"});
  const std::string sep = to_str(b.get_or(0, Value("")));
  const Value attribute = b.get_or(1, Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute.is_none() ? item : lookup_path(item, attribute));
  }
  return Value(std::move(out));
}

Value f_length(const Value& v, CallArgs& a) {
  BoundArgs b("length", a, {});
  return Value(length(v));
}

Value f_list(const Value& v, CallArgs& a) {
  BoundArgs b("list", a, {});
  return Value::list(iterate(v));
}

Value f_lower(const Value& v, CallArgs& a) {
  BoundArgs b("lower", a, {});
  return Value(py_lower(to_str(v)));
}

Value f_map(const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return Value::list({});  // Jinja maps nothing over a falsy value, even False
  const auto attribute = std::find_if(a.keyword.begin(), a.keyword.end(),
                                      [](const auto& kw) { return kw.first == "attribute"; });
  if (a.positional.empty() && attribute != a.keyword.end()) {
    Value fallback = Value::none();
    for (const auto& [name, value] : a.keyword) {
      if (name == "default") fallback = value;
      else if (name != "attribute") eval_fail("map(): unexpected keyword argument '{}'", name);
    }
    for (const Value& item : iterate(v)) {
      Value x = lookup_path(item, attribute->second);
      out.push_back(x.is_undefined() && !fallback.is_none() ? fallback : x);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) eval_fail("map requires a filter argument");
  const std::string filter = a.positional[0].as_string();
  if (std::string err = check_filter_name(filter); !err.empty()) throw EvalError(err);
  for (const Value& item : iterate(v)) {
    CallArgs rest{{a.positional.begin() + 1, a.positional.end()}, a.keyword};
    out.push_back(apply_filter(filter, item, rest));
  }
  return Value::list(std::move(out));
}

Value min_or_max(const Value& v, CallArgs& a, bool want_max) {
  BoundArgs b(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool cs = truthy(b.get_or(0, Value(false)));
  const Value attribute = b.get_or(1, Value::none());
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const Value ki = sort_key(items[i], attribute, cs), kb = sort_key(items[best], attribute, cs);
    if (want_max ? less(kb, ki) : less(ki, kb)) best = i;
  }
  return items[best];
}
Value f_max(const Value& v, CallArgs& a) { return min_or_max(v, a, true); }
Value f_min(const Value& v, CallArgs& a) { return min_or_max(v, a, false); }

// select/reject/selectattr/rejectattr: an optional attribute, then an optional test and its args.
Value select_impl(const Value& v, CallArgs& a, bool by_attribute, bool keep) {
  if (!truthy(v)) return Value::list({});
  size_t off = 0;
  Value attribute;
  if (by_attribute) {
    if (a.positional.empty()) eval_fail("Missing parameter for attribute name");
    attribute = a.positional[0];
    off = 1;
  }
  std::string test;
  if (a.positional.size() > off) {
    if (!a.positional[off].is_string()) eval_fail("the test name must be a string");
    test = a.positional[off].as_string();
    if (std::string err = check_test_name(test); !err.empty()) throw EvalError(err);
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value x = by_attribute ? lookup_path(item, attribute) : item;
    bool pass = false;
    if (test.empty()) {
      pass = truthy(x);
    } else {
      CallArgs rest{{a.positional.begin() + static_cast<long>(off) + 1, a.positional.end()}, a.keyword};
      pass = apply_test(test, x, rest);
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& v, CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, false); }

Value f_replace(const Value& v, CallArgs& a) {
  BoundArgs b("replace", a, {"old", "new", "count"});
  if (!b.has(0) || !b.has(1)) eval_fail("replace() needs the old and the new text");
  const Value count = b.get_or(2, Value::none());
  return Value(py_replace(to_str(v), to_str(*b.get(0)), to_str(*b.get(1)),
                          count.is_none() ? -1 : b.int_at(2)));
}

Value f_reverse(const Value& v, CallArgs& a) {
  BoundArgs b("reverse", a, {});
  if (v.is_string()) return slice(v, Value::none(), Value::none(), Value(-1));
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_safe(const Value& v, CallArgs& a) {
  BoundArgs b("safe", a, {});
  return Value(to_str(v));
}

Value f_sort(const Value& v, CallArgs& a) {
  BoundArgs b("sort", a, {"reverse", "case_sensitive", "attribute"});
  return Value::list(sorted(iterate(v), b.get_or(2, Value::none()), truthy(b.get_or(1, Value(false))),
                            truthy(b.get_or(0, Value(false)))));
}

Value f_string(const Value& v, CallArgs& a) {
  BoundArgs b("string", a, {});
  return Value(to_str(v));
}

Value f_sum(const Value& v, CallArgs& a) {
  BoundArgs b("sum", a, {"attribute", "start"});
  Value total = b.get_or(1, Value(0));
  const Value attribute = b.get_or(0, Value::none());
  for (const Value& item : iterate(v)) {
    total = binary_op("+", total, attribute.is_none() ? item : lookup_path(item, attribute));
  }
  return total;
}

Value f_title(const Value& v, CallArgs& a) {
  BoundArgs b("title", a, {});
  return Value(jinja_title(to_str(v)));
}

Value f_tojson(const Value& v, CallArgs& a) {
  BoundArgs b("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = truthy(b.get_or(0, Value(false)));
  const Value indent = b.get_or(1, Value::none());
  if (indent.is_string()) o.indent = indent.as_string();
  else if (indent.is_integral()) o.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)), ' ');
  else if (!indent.is_none()) eval_fail("tojson(): indent must be an int or a str, not {}", type_name(indent));
  const Value separators = b.get_or(2, Value::none());
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.as_list().items.size() != 2 ||
        !separators.as_list().items[0].is_string() || !separators.as_list().items[1].is_string()) {
      eval_fail("tojson(): separators must be a pair of strings");
    }
    o.item_separator = separators.as_list().items[0].as_string();
    o.key_separator = separators.as_list().items[1].as_string();
  }
  o.sort_keys = truthy(b.get_or(3, Value(false)));
  return Value(dump_json(v, o));
}

Value f_trim(const Value& v, CallArgs& a) {
  BoundArgs b("trim", a, {"chars"});
  const Value chars = b.get_or(0, Value::none());
  return Value(py_strip(to_str(v), chars.is_none() ? std::nullopt : std::optional(b.string_at(0)), true, true));
}

Value f_unique(const Value& v, CallArgs& a) {
  BoundArgs b("unique", a, {"case_sensitive", "attribute"});
  const bool cs = truthy(b.get_or(0, Value(false)));
  const Value attribute = b.get_or(1, Value::none());
  std::vector<Value> out, seen;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(item, attribute, cs);
    if ((key.is_list() && !key.as_list().tuple) || key.is_dict()) eval_fail("unhashable type: '{}'", type_name(key));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_upper(const Value& v, CallArgs& a) {
  BoundArgs b("upper", a, {});
  return Value(py_upper(to_str(v)));
}

const std::unordered_map<std::string_view, Filter>& filters() {
  static const std::unordered_map<std::string_view, Filter> table = {
      {"abs", f_abs},           {"capitalize", f_capitalize}, {"count", f_length},
      {"d", f_default},         {"default", f_default},       {"dictsort", f_dictsort},
      {"e", f_escape},          {"escape", f_escape},         {"first", f_first},
      {"float", f_float},       {"format", f_format},         {"indent", f_indent},         {"int", f_int},
      {"items", f_items},       {"join", f_join},             {"last", f_last},
      {"length", f_length},     {"list", f_list},             {"lower", f_lower},
      {"map", f_map},           {"max", f_max},               {"min", f_min},
      {"reject", f_reject},     {"rejectattr", f_rejectattr}, {"replace", f_replace},
      {"reverse", f_reverse},   {"safe", f_safe},             {"select", f_select},
      {"selectattr", f_selectattr}, {"sort", f_sort},         {"string", f_string},
      {"sum", f_sum},           {"title", f_title},           {"tojson", f_tojson},
      {"trim", f_trim},         {"unique", f_unique},         {"upper", f_upper},
  };
  return table;
}

}  // namespace

// Filters Jinja has and fp4serve does not: a template may name them on a branch it never takes,
// which Jinja accepts, so they fail only when called.
bool jinja_only_filter(std::string_view name) {
  static constexpr std::string_view kJinjaOnly[] = {
      "attr",     "batch",     "center",   "filesizeformat", "forceescape",
      "groupby",  "pprint",    "random",   "round",          "slice",       "striptags",
      "truncate", "urlencode", "urlize",   "wordcount",      "wordwrap",    "xmlattr"};
  for (std::string_view known : kJinjaOnly) {
    if (known == name) return true;
  }
  return false;
}

std::string check_filter_name(std::string_view name) {
  if (filters().count(name) || jinja_only_filter(name)) return "";
  return fmt::format("no filter named '{}'", name);
}

Value apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  const auto it = filters().find(name);
  if (it != filters().end()) return it->second(subject, args);
  if (jinja_only_filter(name)) eval_fail("filter '{}' is not supported in chat templates", name);
  eval_fail("no filter named '{}'", name);
}

Value lookup_path(const Value& item, const Value& path) {
  if (!path.is_string()) return get_item(item, path);
  Value v = item;
  for (const std::string& part : py_split(path.as_string(), std::string("."), -1)) {
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
  }
  return v;
}

}  // namespace fp4::chat::jinja
