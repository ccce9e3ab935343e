#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cstdlib>

#include "chat/jinja_strings.h"
#include "core/check.h"

namespace fp4::chat::jinja {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Jinja reads a line break as \r\n, \r or \n, and drops one final line break.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) root();
    push(TokenType::End, src_.size());
    return std::move(out_);
  }

 private:
  SourcePos position(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_start = *(it - 1);
    return {static_cast<int>(it - line_starts_.begin()),
            static_cast<int>(utf8_length(std::string_view(src_).substr(line_start, offset - line_start))) + 1};
  }

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    syntax_error(position(offset), message);
  }

  Token& push(TokenType type, size_t offset, std::string value = {}) {
    out_.push_back(Token{type, std::move(value), 0, 0, position(offset)});
    return out_.back();
  }

  bool at(size_t p, std::string_view s) const { return src_.compare(p, s.size(), s) == 0; }

  // Python's \s: whitespace code points.
  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      size_t q = p;
      if (!py_isspace(utf8_next(src_, q))) break;
      p = q;
    }
    return p;
  }

  // The text before a tag, trimmed as the tag's sign and lstrip_blocks ask.
  void emit_text(std::string text, size_t offset, char sign, bool lstrip_applies) {
    if (sign == '-') {
      text = py_strip(text, std::nullopt, false, true);
    } else if (sign != '+' && lstrip_applies) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
          py_strip(text.substr(l_pos), std::nullopt, true, true).empty()) {
        text.resize(l_pos);
      }
    }
    if (!text.empty()) push(TokenType::Text, offset, std::move(text));
  }

  void root() {
    size_t start = pos_;
    while (true) {
      start = src_.find('{', start);
      if (start == std::string::npos || start + 1 >= src_.size()) {
        push(TokenType::Text, pos_, src_.substr(pos_));
        pos_ = src_.size();
        return;
      }
      const char kind = src_[start + 1];
      if (kind == '{' || kind == '%' || kind == '#') break;
      ++start;
    }
    const char kind = src_[start + 1];
    size_t p = start + 2;
    const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
    if (sign) ++p;
    const size_t raw_end = kind == '%' ? match_raw_begin(p) : 0;
    emit_text(src_.substr(pos_, start - pos_), pos_, sign, kind != '{');
    line_starting_ = false;
    if (raw_end) {
      raw(raw_end);
    } else if (kind == '#') {
      comment(p, start);
    } else {
      tag(kind == '%', p, start);
    }
  }

  // The end of `{% raw %}` when the block at p (after `{%` and its sign) is one, else 0.
  size_t match_raw_begin(size_t p) const {
    p = skip_space(p);
    if (!at(p, "raw")) return 0;
    p = skip_space(p + 3);
    if (at(p, "-%}")) return skip_space(p + 3);
    if (at(p, "%}")) return p + 2;
    return 0;
  }

  void raw(size_t body) {
    line_starting_ = src_[body - 1] == '\n';
    for (size_t p = src_.find("{%", body); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      q = skip_space(q);
      if (!at(q, "endraw")) continue;
      q = skip_space(q + 6);
      size_t end = 0;
      if (at(q, "+%}")) end = q + 3;
      else if (at(q, "-%}")) end = skip_space(q + 3);
      else if (at(q, "%}")) end = q + 2 + (at(q + 2, "\n") ? 1 : 0);
      else continue;
      emit_text(src_.substr(body, p - body), body, sign, true);
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    fail(body, "missing end of raw directive");
  }

  void comment(size_t p, size_t start) {
    for (; p < src_.size(); ++p) {
      size_t end = 0;
      if (at(p, "+#}")) end = p + 3;
      else if (at(p, "-#}")) end = skip_space(p + 3);
      else if (at(p, "#}")) end = p + 2 + (at(p + 2, "\n") ? 1 : 0);
      if (end) {
        line_starting_ = src_[end - 1] == '\n';
        pos_ = end;
        return;
      }
    }
    fail(start, "missing end of comment tag");
  }

  void tag(bool block, size_t p, size_t start) {
    push(block ? TokenType::BlockBegin : TokenType::VariableBegin, start, block ? "{%" : "{{");
    std::vector<char> balance;  // closers expected, innermost last
    while (true) {
      if (p >= src_.size()) {
        fail(start, fmt::format("unexpected end of template, the tag is not closed with '{}'",
                                block ? "%}" : "}}"));
      }
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          if (at(p, "+%}")) end = p + 3;
          else if (at(p, "-%}")) end = skip_space(p + 3);
          else if (at(p, "%}")) end = p + 2 + (at(p + 2, "\n") ? 1 : 0);
        } else {
          if (at(p, "-}}")) end = skip_space(p + 3);
          else if (at(p, "}}")) end = p + 2;
        }
        if (end) {
          push(block ? TokenType::BlockEnd : TokenType::VariableEnd, p, block ? "%}" : "}}");
          line_starting_ = src_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      const size_t skipped = skip_space(p);
      if (skipped != p) {
        p = skipped;
        continue;
      }
      const char c = src_[p];
      if (is_digit(c)) {
        p = number(p);
      } else if (is_name_start(c)) {
        size_t q = p;
        while (q < src_.size() && is_name_char(src_[q])) ++q;
        push(TokenType::Name, p, src_.substr(p, q - p));
        p = q;
      } else if (c == '\'' || c == '"') {
        p = string(p);
      } else {
        p = op(p, balance);
      }
    }
  }

  size_t digits(size_t p) const {  // \d+(_\d+)*
    if (p >= src_.size() || !is_digit(src_[p])) return p;
    while (p < src_.size() && is_digit(src_[p])) {
      ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && is_digit(src_[p + 1])) ++p;
    }
    return p;
  }

  size_t number(size_t p) {
    size_t q = digits(p);
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
      q = digits(q + 1);
      is_float = true;
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      const size_t e = digits(r);
      if (e > r) {
        q = e;
        is_float = true;
      }
    }
    std::string text = src_.substr(p, q - p);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    if (is_float) {
      push(TokenType::Float, p, text).float_value = std::strtod(text.c_str(), nullptr);
      return q;
    }
    int base = 10;
    size_t body = p;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char x = static_cast<char>(src_[p + 1] | 0x20);
      base = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 10;
      if (base != 10) body = p + 2;
    }
    if (base == 10 && src_[p] == '0') {
      q = p + 1;  // Python allows only zeros after a leading zero
      while (q < src_.size() && (src_[q] == '0' || (src_[q] == '_' && at(q + 1, "0")))) ++q;
    } else if (base != 10) {
      q = body;
      while (q < src_.size() && ((hex_value(src_[q]) >= 0 && hex_value(src_[q]) < base) || src_[q] == '_')) ++q;
      if (q == body) fail(p, "invalid integer literal");
    }
    int64_t value = 0;
    for (size_t i = body; i < q; ++i) {
      if (src_[i] == '_') continue;
      if (__builtin_mul_overflow(value, base, &value) ||
          __builtin_add_overflow(value, hex_value(src_[i]), &value)) {
        fail(p, "integer literal too large");
      }
    }
    push(TokenType::Integer, p, src_.substr(p, q - p)).int_value = value;
    return q;
  }

  // A quoted literal, unescaped as Python's unicode-escape codec does (Jinja's own rule).
  size_t string(size_t p) {
    const char quote = src_[p];
    std::string value;
    size_t q = p + 1;
    auto code = [&](size_t from, int count) {
      uint32_t v = 0;
      for (int i = 0; i < count; ++i) {
        const int h = from + i < src_.size() ? hex_value(src_[from + i]) : -1;
        if (h < 0) fail(q, "truncated \\xXX, \\uXXXX or \\UXXXXXXXX escape in a string literal");
        v = v * 16 + static_cast<uint32_t>(h);
      }
      if (v > 0x10FFFF) fail(q, "illegal Unicode character in a string literal");
      return static_cast<char32_t>(v);
    };
    while (true) {
      if (q >= src_.size()) fail(p, "unterminated string literal");
      const char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) fail(p, "unterminated string literal");
      const char e = src_[q + 1];
      size_t next = q + 2;
      switch (e) {
        case '\n': break;
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'n': value.push_back('\n'); break;
        case 'r': value.push_back('\r'); break;
        case 't': value.push_back('\t'); break;
        case 'v': value.push_back('\v'); break;
        case 'x': utf8_append(value, code(q + 2, 2)); next = q + 4; break;
        case 'u': utf8_append(value, code(q + 2, 4)); next = q + 6; break;
        case 'U': utf8_append(value, code(q + 2, 8)); next = q + 10; break;
        case 'N': fail(q, "\\N{...} escapes are not supported in string literals");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = 0;
            next = q + 1;
            for (int i = 0; i < 3 && next < src_.size() && src_[next] >= '0' && src_[next] <= '7'; ++i) {
              v = v * 8 + static_cast<uint32_t>(src_[next++] - '0');
            }
            utf8_append(value, v);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // Jinja escapes non-ASCII text as \xNN/\uNNNN before decoding, so a backslash in
            // front of such a character keeps that escape's text.
            size_t i = q + 1;
            const char32_t cp = utf8_next(src_, i);
            utf8_append(value, U'\\');
            value += cp < 0x100 ? fmt::format("x{:02x}", static_cast<unsigned>(cp))
                     : cp < 0x10000 ? fmt::format("u{:04x}", static_cast<unsigned>(cp))
                                    : fmt::format("U{:08x}", static_cast<unsigned>(cp));
            next = i;
          } else {
            value.push_back('\\');
            value.push_back(e);
          }
      }
      q = next;
    }
    push(TokenType::String, p, std::move(value));
    return q + 1;
  }

  size_t op(size_t p, std::vector<char>& balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view two : kTwo) {
      if (at(p, two)) {
        push(TokenType::Operator, p, std::string(two));
        return p + 2;
      }
    }
    const char c = src_[p];
    if (std::string_view("+-/*%~[](){}|.,:;=<>").find(c) == std::string_view::npos) {
      size_t q = p;
      std::string ch;
      utf8_append(ch, utf8_next(src_, q));
      fail(p, fmt::format("unexpected character {}", py_repr(ch)));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(p, fmt::format("unexpected '{}'", c));
      if (balance.back() != c) fail(p, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      balance.pop_back();
    }
    push(TokenType::Operator, p, std::string(1, c));
    return p + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the last match ended a line (lstrip_blocks' condition)
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::Text: return "template text";
    case TokenType::End: return "end of template";
    case TokenType::String: return "string literal";
    case TokenType::Integer:
    case TokenType::Float: return "number";
    default: return "'" + token.value + "'";
  }
}

void syntax_error(SourcePos pos, const std::string& message) {
  fail("chat template syntax error at line {}, column {}: {}", pos.line, pos.column, message);
}

}  // namespace fp4::chat::jinja
