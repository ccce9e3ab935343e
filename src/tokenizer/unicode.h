// Code points, UTF-8 and the Unicode character classes that Hugging Face tokenizers' regexes
// use. Text handed to the tokenizer is valid UTF-8; byte strings produced while decoding token
// ids need not be, and are repaired the way Rust's String::from_utf8_lossy repairs them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace fp4::tokenizer {

bool is_letter(char32_t cp);      // \p{L}
bool is_number(char32_t cp);      // \p{N}
bool is_whitespace(char32_t cp);  // \s (the White_Space property)
bool is_word_char(char32_t cp);   // \w as Rust's regex crate defines it

// One step of a UTF-8 scan at a byte offset. A well-formed character gives its length. An
// ill-formed one gives the length of its maximal subpart (Unicode §3.9: the longest prefix of a
// well-formed sequence, at least one byte), and `truncated` says that this subpart ran into the
// end of the input, so that more bytes could still complete it.
struct Utf8Step {
  size_t len;
  bool valid;
  bool truncated;
  char32_t cp;  // meaningful when valid
};
Utf8Step utf8_step(std::string_view bytes, size_t pos);

// Decodes the character at `pos` of valid UTF-8 text and advances `pos` past it.
char32_t next_char(std::string_view text, size_t& pos);
void append_utf8(std::string& out, char32_t cp);

// The byte offset of the first ill-formed sequence, or npos when `bytes` is valid UTF-8.
size_t find_invalid_utf8(std::string_view bytes);

// String::from_utf8_lossy: every maximal subpart of an ill-formed sequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// The length of a trailing ill-formed sequence that more bytes could still complete (0 to 3).
size_t incomplete_utf8_tail(std::string_view bytes);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace fp4::tokenizer
