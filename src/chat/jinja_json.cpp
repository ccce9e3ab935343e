#include "chat/jinja_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat/jinja_error.h"
#include "chat/jinja_strings.h"

namespace fp4::chat::jinja {

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData d;
      for (const auto& [k, item] : j.items()) d.set(k, from_json(item));
      return Value::dict(std::move(d));
    }
    default: eval_fail("JSON value of type {} has no template equivalent", j.type_name());
  }
}

namespace {

void dump_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  char buf[16];
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out.push_back('"');
}

void dump(const Value& v, const JsonDumpOptions& o, const std::string& item_sep, int depth,
          std::string& out) {
  auto newline = [&](int level) {
    if (!o.indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += py_float_repr(d);
      return;
    }
    case Value::Kind::String: dump_string(v.as_string(), o.ensure_ascii, out); return;
    case Value::Kind::List: {
      if (v.is_view()) eval_fail("Object of type {} is not JSON serializable", type_name(v));
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        dump(items[i], o, item_sep, depth + 1, out);
      }
      newline(depth);
      out.push_back(']');
      return;
    }
    case Value::Kind::Dict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.as_dict().entries()) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        dump_string(entries[i]->first, o.ensure_ascii, out);
        out += o.key_separator;
        dump(entries[i]->second, o, item_sep, depth + 1, out);
      }
      newline(depth);
      out.push_back('}');
      return;
    }
    case Value::Kind::Undefined:
    case Value::Kind::Namespace:
    case Value::Kind::Callable:
      eval_fail("Object of type {} is not JSON serializable", type_name(v));
  }
}

}  // namespace

std::string dump_json(const Value& v, const JsonDumpOptions& options) {
  const std::string item_sep = options.item_separator ? *options.item_separator
                               : options.indent       ? ","
                                                      : ", ";
  std::string out;
  dump(v, options, item_sep, 0, out);
  return out;
}

}  // namespace fp4::chat::jinja
