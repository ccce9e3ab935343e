#include "chat/jinja_format.h"

#include <cmath>
#include <cstdio>

#include "chat/jinja_error.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_strings.h"

namespace fp4::chat::jinja {

namespace {

struct Spec {
  bool left = false, plus = false, space = false, alt = false, zero = false;
  int64_t width = -1;
  int64_t precision = -1;
  char conversion = 0;
};

// Pads `body` (sign and prefix already included) to the spec's width, in code points.
std::string pad(std::string body, const Spec& spec, bool numeric) {
  const auto len = static_cast<int64_t>(utf8_length(body));
  if (spec.width <= len) return body;
  const auto fill = static_cast<size_t>(spec.width - len);
  if (spec.left) return body + std::string(fill, ' ');
  if (numeric && spec.zero) {
    // Zeros go after the sign and any 0x/0o prefix.
    size_t at = 0;
    if (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) at = 1;
    if (body.size() >= at + 2 && body[at] == '0' && std::string("xXo").find(body[at + 1]) != std::string::npos) at += 2;
    return body.insert(at, fill, '0');
  }
  return std::string(fill, ' ') + body;
}

std::string sign_of(bool negative, const Spec& spec) {
  return negative ? "-" : spec.plus ? "+" : spec.space ? " " : "";
}

std::string format_int(const Value& arg, const Spec& spec) {
  const char c = spec.conversion;
  int64_t v = 0;
  if (arg.is_integral()) {
    v = arg.as_int();
  } else if (arg.kind() == Value::Kind::Float && (c == 'd' || c == 'i' || c == 'u')) {
    const double d = arg.as_double();
    if (!std::isfinite(d)) eval_fail("cannot convert float {} to integer", py_float_repr(d));
    v = static_cast<int64_t>(d);
  } else {
    if (arg.is_undefined()) fail_undefined(arg);
    if (c == 'd' || c == 'i' || c == 'u') eval_fail("%{} format: a real number is required, not {}", c, type_name(arg));
    eval_fail("%{} format: an integer is required, not {}", c, type_name(arg));
  }
  const bool negative = v < 0;
  const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  char buf[32];
  const char* fmt_code = c == 'x' ? "%llx" : c == 'X' ? "%llX" : c == 'o' ? "%llo" : "%llu";
  std::snprintf(buf, sizeof(buf), fmt_code, static_cast<unsigned long long>(magnitude));
  std::string digits = buf;
  if (spec.precision > static_cast<int64_t>(digits.size())) {
    digits.insert(0, static_cast<size_t>(spec.precision) - digits.size(), '0');
  }
  std::string prefix;
  if (spec.alt && (c == 'x' || c == 'X')) prefix = c == 'x' ? "0x" : "0X";
  if (spec.alt && c == 'o') prefix = "0o";
  return pad(sign_of(negative, spec) + prefix + digits, spec, true);
}

std::string format_float(const Value& arg, const Spec& spec) {
  if (!arg.is_number()) {
    if (arg.is_undefined()) fail_undefined(arg);
    eval_fail("must be real number, not {}", type_name(arg));
  }
  const double d = arg.as_double();
  std::string code = "%";
  if (spec.alt) code += '#';
  code += ".*";
  code += spec.conversion;
  const int precision = spec.precision < 0 ? 6 : static_cast<int>(std::min<int64_t>(spec.precision, 100));
  char buf[512];
  std::snprintf(buf, sizeof(buf), code.c_str(), precision, std::fabs(d));
  return pad(sign_of(std::signbit(d) && !std::isnan(d), spec) + buf, spec, std::isfinite(d));
}

std::string format_one(const Value& arg, const Spec& spec) {
  switch (spec.conversion) {
    case 's':
    case 'r': {
      std::string s = spec.conversion == 's' ? to_str(arg) : (arg.is_undefined() ? "Undefined" : repr(arg));
      if (spec.precision >= 0) {
        const std::u32string u = utf8_decode(s);
        if (static_cast<int64_t>(u.size()) > spec.precision) s = utf8_encode(u.substr(0, static_cast<size_t>(spec.precision)));
      }
      return pad(std::move(s), spec, false);
    }
    case 'c': {
      std::string s;
      if (arg.is_integral()) {
        if (arg.as_int() < 0 || arg.as_int() > 0x10FFFF) eval_fail("%c arg not in range(0x110000)");
        utf8_append(s, static_cast<char32_t>(arg.as_int()));
      } else if (arg.is_string() && utf8_length(arg.as_string()) == 1) {
        s = arg.as_string();
      } else {
        eval_fail("%c requires an int or a unicode character, not {}", type_name(arg));
      }
      return pad(std::move(s), spec, false);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': return format_int(arg, spec);
    default: return format_float(arg, spec);
  }
}

}  // namespace

std::string percent_format(const std::string& format, const Value& args) {
  const bool tuple = args.is_list() && args.as_list().tuple;
  // Python treats anything indexable but a tuple or str as a mapping: %(key)s may read it, and
  // leaving it unused is no error.
  const bool mapping = args.is_dict() || (args.is_sequence_list() && !tuple) || args.is_undefined();
  const std::vector<Value> single{args};
  const std::vector<Value>& items = tuple ? args.as_list().items : single;
  size_t next = 0;
  auto next_arg = [&]() -> const Value& {
    if (next >= items.size()) eval_fail("not enough arguments for format string");
    return items[next++];
  };
  std::string out;
  size_t i = 0;
  auto incomplete = [&] {
    if (i >= format.size()) eval_fail("incomplete format");
  };
  while (i < format.size()) {
    const char c = format[i++];
    if (c != '%') {
      out.push_back(c);
      continue;
    }
    incomplete();
    std::optional<std::string> key;
    if (format[i] == '(') {
      if (!mapping) eval_fail("format requires a mapping");
      int depth = 1;
      const size_t start = ++i;
      while (i < format.size() && depth > 0) {
        if (format[i] == '(') ++depth;
        if (format[i] == ')') --depth;
        ++i;
      }
      if (depth > 0) eval_fail("incomplete format key");
      key = format.substr(start, i - 1 - start);
    }
    Spec spec;
    for (; i < format.size() && std::string("-+ #0").find(format[i]) != std::string::npos; ++i) {
      switch (format[i]) {
        case '-': spec.left = true; break;
        case '+': spec.plus = true; break;
        case ' ': spec.space = true; break;
        case '#': spec.alt = true; break;
        default: spec.zero = true;
      }
    }
    auto number = [&](int64_t& field) {
      if (i < format.size() && format[i] == '*') {
        ++i;
        const Value& v = next_arg();
        if (!v.is_integral()) eval_fail("* wants int");
        field = v.as_int();
        return;
      }
      int64_t n = -1;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') n = std::max<int64_t>(n, 0) * 10 + (format[i++] - '0');
      field = n;
    };
    number(spec.width);
    if (spec.width < -1) {
      spec.left = true;
      spec.width = -spec.width;
    }
    if (i < format.size() && format[i] == '.') {
      ++i;
      number(spec.precision);
      if (spec.precision < 0) spec.precision = 0;
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    incomplete();
    spec.conversion = format[i++];
    if (spec.conversion == '%') {
      out.push_back('%');
      continue;
    }
    if (std::string("srcdiuxXofFeEgG").find(spec.conversion) == std::string::npos) {
      eval_fail("unsupported format character '{}' (0x{:x}) at index {}", spec.conversion,
                static_cast<unsigned char>(spec.conversion), i - 1);
    }
    if (key) {
      if (args.is_undefined()) fail_undefined(args);
      if (!args.is_dict()) eval_fail("list indices must be integers or slices, not str");
      const Value* v = args.as_dict().find(*key);
      if (!v) eval_fail("KeyError: {}", py_repr(*key));
      out += format_one(*v, spec);
    } else {
      out += format_one(next_arg(), spec);
    }
    if (out.size() > kMaxStringBytes) eval_fail("formatted string too long");
  }
  if (next < items.size() && !mapping) eval_fail("not all arguments converted during string formatting");
  return out;
}

}  // namespace fp4::chat::jinja
