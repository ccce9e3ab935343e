#include "tokenizer/unicode.h"

#include <algorithm>
#include <iterator>

namespace fp4::tokenizer {
namespace detail {

struct CodepointRange {
  char32_t lo;
  char32_t hi;
};

#include "tokenizer/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodepointRange (&table)[N], char32_t cp) {
  const CodepointRange* it =
      std::upper_bound(std::begin(table), std::end(table), cp,
                       [](char32_t c, const CodepointRange& r) { return c < r.lo; });
  return it != std::begin(table) && cp <= std::prev(it)->hi;
}

}  // namespace detail

bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return detail::in_ranges(detail::kLetterRanges, cp);
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return detail::in_ranges(detail::kNumberRanges, cp);
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return detail::in_ranges(detail::kWhitespaceRanges, cp);
}

bool is_word_char(char32_t cp) { return detail::in_ranges(detail::kWordRanges, cp); }

Utf8Step utf8_step(std::string_view bytes, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {1, true, false, lead};
  // Table 3-7 of the Unicode standard: the length of each well-formed sequence and the range
  // allowed for its second byte (the later bytes are always 80..BF).
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  char32_t cp = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2, cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3, cp = lead & 0x0F;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4, cp = lead & 0x07;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return {1, false, false, 0};
  }
  size_t len = 1;
  for (; len < need; ++len) {
    if (pos + len >= bytes.size()) return {len, false, true, 0};
    const unsigned char b = byte(pos + len);
    const unsigned char min = len == 1 ? lo : 0x80, max = len == 1 ? hi : 0xBF;
    if (b < min || b > max) return {len, false, false, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {len, true, false, cp};
}

char32_t next_char(std::string_view text, size_t& pos) {
  const Utf8Step step = utf8_step(text, pos);
  pos += step.len;
  return step.valid ? step.cp : 0xFFFD;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t find_invalid_utf8(std::string_view bytes) {
  for (size_t pos = 0; pos < bytes.size();) {
    const Utf8Step step = utf8_step(bytes, pos);
    if (!step.valid) return pos;
    pos += step.len;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const Utf8Step step = utf8_step(bytes, pos);
    if (step.valid) {
      out.append(bytes.substr(pos, step.len));
    } else {
      out.append(kReplacementChar);
    }
    pos += step.len;
  }
  return out;
}

size_t incomplete_utf8_tail(std::string_view bytes) {
  // A sequence is at most 4 bytes, so only a lead byte among the last 3 can start one that
  // is still open.
  const size_t first = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (size_t pos = first; pos < bytes.size(); ++pos) {
    const auto b = static_cast<unsigned char>(bytes[pos]);
    if (b >= 0x80 && b < 0xC0) continue;  // a continuation byte cannot start a sequence
    const Utf8Step step = utf8_step(bytes, pos);
    if (step.truncated) return bytes.size() - pos;
  }
  return 0;
}

}  // namespace fp4::tokenizer
