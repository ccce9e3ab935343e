// From input text to the words the BPE model sees: the normalizer (run on each stretch of text
// between added tokens) and the pre-tokenizer (which cuts a stretch into words), as configured
// by tokenizer.json's "normalizer" and "pre_tokenizer".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_fields.h"

namespace fp4::tokenizer {

// GPT-2's pre-tokenization regex, spelled exactly as tokenizer.json files carry it. It is
// implemented by hand (split_gpt2), so a Split pre-tokenizer must carry exactly this pattern.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Cuts valid UTF-8 text into the consecutive matches of kGpt2Pattern (which cover it all).
void split_gpt2(std::string_view text, std::vector<std::string_view>& pieces);

// GPT-2's reversible map from bytes to printable characters: byte_level_char(b) is the UTF-8 of
// the character standing for byte b; byte_level_byte(cp) is the byte, or -1 for a character
// that stands for none.
std::string_view byte_level_char(uint8_t byte);
int byte_level_byte(char32_t cp);

// Every non-overlapping occurrence of `from` (non-empty), left to right, replaced by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

// A stretch of text on its way to the model. at_origin: it begins at byte 0 of the input, which
// Metaspace's "first" prepend scheme asks about.
struct Piece {
  std::string text;
  bool at_origin = false;
};

class Normalizer {
 public:
  // `normalizer` may be null (no normalization).
  static Normalizer from_json(const detail::Json& normalizer, const detail::JsonAt& at);
  std::string apply(std::string_view text) const;

 private:
  struct Step {
    enum class Kind { kPrepend, kReplace } kind;
    std::string text;     // what Prepend puts in front; what Replace looks for
    std::string content;  // what Replace puts instead
  };
  void add(const detail::Json& normalizer, const detail::JsonAt& at);
  std::vector<Step> steps_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class PreTokenizer {
 public:
  // `pre_tokenizer` may be null (the whole piece is one word).
  static PreTokenizer from_json(const detail::Json& pre_tokenizer, const detail::JsonAt& at);
  // Appends the words of `piece` to `words`; empty words are dropped, as Hugging Face does.
  void split(const Piece& piece, std::vector<Piece>& words) const;

 private:
  struct Step {
    enum class Kind { kByteLevel, kMetaspace, kGpt2Split } kind;
    bool add_prefix_space = false;  // ByteLevel
    bool use_regex = true;          // ByteLevel
    std::string replacement;        // Metaspace
    PrependScheme prepend_scheme = PrependScheme::kAlways;
    bool split = true;  // Metaspace
  };
  void add(const detail::Json& pre_tokenizer, const detail::JsonAt& at);
  static void apply(const Step& step, const Piece& piece, std::vector<Piece>& out);
  std::vector<Step> steps_;
};

}  // namespace fp4::tokenizer
