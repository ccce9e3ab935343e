// Python's str semantics over UTF-8 bytes. Chat templates are Python code in effect: lengths,
// slices and strip() count code points, and upper()/title()/repr() follow CPython, so the
// rendering can match transformers byte for byte.
//
// Bytes that are not valid UTF-8 decode to U+DC80..U+DCFF and encode back to the same byte
// (Python's "surrogateescape"), so no input is ever altered by a round trip.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp4::chat::jinja {

std::u32string utf8_decode(std::string_view s);
// The code point at s[i], advancing i past it.
char32_t utf8_next(std::string_view s, size_t& i);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);
// Number of code points (Python's len(str)).
size_t utf8_length(std::string_view s);

// str.isspace() for one code point; also what the regex \s matches in Python.
bool py_isspace(char32_t c);
// Cased letters and their simple case mappings (the C.UTF-8 locale's tables).
char32_t py_toupper(char32_t c);
char32_t py_tolower(char32_t c);
bool py_iscased(char32_t c);

// str.strip/lstrip/rstrip: `chars` absent strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split / str.rsplit: `sep` absent splits on runs of whitespace and drops empty parts.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right = false);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// str.replace; count < 0 replaces every occurrence.
std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       int64_t count);
// str.find and str.count in code points; -1 when absent.
int64_t py_find(std::string_view s, std::string_view sub, bool from_right);
int64_t py_count(std::string_view s, std::string_view sub);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
// Jinja's title filter: words start after runs of whitespace, '-', '(', '{', '[' and '<'.
std::string jinja_title(std::string_view s);

// repr(str): quotes and escapes as CPython prints them.
std::string py_repr(std::string_view s);
// repr(float) / str(float): the shortest digits that round-trip, laid out as CPython does.
std::string py_float_repr(double v);

}  // namespace fp4::chat::jinja
