#include "chat/jinja_strings.h"

#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace fp4::chat::jinja {

namespace {

constexpr char32_t kEscapeBase = 0xDC00;  // surrogateescape: byte b <-> U+DC00 + b

// Decodes one code point at s[i], advancing i; an invalid byte becomes its escape.
char32_t decode_one_impl(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int len = 0;
  char32_t c = 0;
  if (b0 < 0x80) {
    ++i;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    c = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    c = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    c = b0 & 0x07;
  }
  if (len == 0 || i + len > s.size()) {
    ++i;
    return kEscapeBase + b0;
  }
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return kEscapeBase + b0;
    }
    c = (c << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8 either.
  static constexpr std::array<char32_t, 5> kMin = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMin[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    ++i;
    return kEscapeBase + b0;
  }
  i += len;
  return c;
}

locale_t utf8_locale() {
  // C.UTF-8 is built into glibc; without it the case tables fall back to ASCII below.
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return loc;
}

bool in_chars(char32_t c, const std::u32string& set) {
  return set.find(c) != std::u32string::npos;
}

}  // namespace

char32_t utf8_next(std::string_view s, size_t& i) { return decode_one_impl(s, i); }

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(utf8_next(s, i));
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) {
    out.push_back(static_cast<char>(c - kEscapeBase));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) utf8_next(s, i);
  return n;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t py_toupper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  const locale_t loc = utf8_locale();
  return loc ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), loc)) : c;
}

char32_t py_tolower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  const locale_t loc = utf8_locale();
  return loc ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), loc)) : c;
}

bool py_iscased(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  const locale_t loc = utf8_locale();
  if (!loc) return false;
  const auto w = static_cast<wint_t>(c);
  return iswupper_l(w, loc) || iswlower_l(w, loc) || py_toupper(c) != c || py_tolower(c) != c;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  const std::u32string u = utf8_decode(s);
  const std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? in_chars(c, set) : py_isspace(c); };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!sep) {
    // Whitespace runs separate words; with a limit the remainder keeps its inner spacing.
    std::u32string u = utf8_decode(s);
    if (from_right) std::reverse(u.begin(), u.end());
    size_t i = 0;
    while (true) {
      while (i < u.size() && py_isspace(u[i])) ++i;
      if (i == u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        std::u32string rest = u.substr(i);  // Python keeps the remainder's far end as it is
        if (from_right) std::reverse(rest.begin(), rest.end());
        parts.push_back(utf8_encode(rest));
        break;
      }
      size_t j = i;
      while (j < u.size() && !py_isspace(u[j])) ++j;
      std::u32string word = u.substr(i, j - i);
      if (from_right) std::reverse(word.begin(), word.end());
      parts.push_back(utf8_encode(word));
      i = j;
    }
    if (from_right) std::reverse(parts.begin(), parts.end());
    return parts;
  }
  const std::string& d = *sep;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = s.find(d, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, at - start));
      start = at + d.size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < d.size()) break;
    const size_t at = s.rfind(d, end - d.size());
    if (at == std::string_view::npos) break;
    parts.emplace_back(s.substr(at + d.size(), end - at - d.size()));
    end = at;
  }
  parts.emplace_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  const std::u32string u = utf8_decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                     c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    size_t end = i + 1;
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') end = i + 2;
    lines.push_back(utf8_encode(std::u32string_view(u).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < u.size()) lines.push_back(utf8_encode(std::u32string_view(u).substr(start)));
  return lines;
}

std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const std::u32string u = utf8_decode(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      utf8_append(out, c);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old_text, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(new_text);
    start = at + old_text.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

int64_t py_find(std::string_view s, std::string_view sub, bool from_right) {
  const size_t at = from_right ? s.rfind(sub) : s.find(sub);
  if (at == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, at)));
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) {
    if (c == 0xDF) {
      out += "SS";  // the one full-case mapping common in text: German sharp s
    } else {
      utf8_append(out, py_toupper(c));
    }
  }
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) utf8_append(out, py_tolower(c));
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : utf8_decode(s)) {
    const char32_t m = previous_cased ? py_tolower(c) : py_toupper(c);
    utf8_append(out, m);
    previous_cased = py_iscased(c);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : utf8_decode(s)) {
    utf8_append(out, first ? py_toupper(c) : py_tolower(c));
    first = false;
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  const std::u32string u = utf8_decode(s);
  auto separator = [](char32_t c) {
    return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  bool word_start = true;
  for (char32_t c : u) {
    if (separator(c)) {
      utf8_append(out, c);
      word_start = true;
    } else {
      utf8_append(out, word_start ? py_toupper(c) : py_tolower(c));
      word_start = false;
    }
  }
  return out;
}

namespace {

// CPython's str.isprintable() is false for controls, format characters, separators other than
// the ASCII space, surrogates and private use; this covers those categories' common members.
bool py_isprintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x80) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  if (c >= 0xF0000) return false;
  return true;
}

}  // namespace

std::string py_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) {
      std::snprintf(buf, sizeof(buf), "\\udc%02x", static_cast<unsigned>(c - kEscapeBase));
      out += buf;
    } else if (py_isprintable(c)) {
      utf8_append(out, c);
    } else if (c < 0x100) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x10000) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // The shortest round-trip digits, as d.ddde[+-]x; CPython then lays them out positionally
  // when the decimal exponent is in [-4, 16) and in exponent form otherwise.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_at = sci.find('e');
  const int exponent = std::stoi(sci.substr(e_at + 1));
  std::string digits = sci.substr(0, e_at);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int decpt = exponent + 1;  // digits are 0.DIGITS x 10^decpt
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  std::snprintf(buf, sizeof(buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + buf;
}

}  // namespace fp4::chat::jinja
