// From token strings back to text: tokenizer.json's "decoder" (a chain of Replace, ByteFallback,
// Fuse, Strip, ByteLevel and Metaspace steps, or none). decode() can also decode a window of a
// longer sequence, which is what lets IncrementalDetokenizer stream text that concatenates to
// exactly what decoding the whole sequence gives.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/json_fields.h"

namespace fp4::tokenizer {

// Where a window of token strings sits in its sequence.
struct DecodeWindow {
  bool first_token = true;  // the window starts at the sequence's first (unskipped) token
  bool text_start = true;   // nothing of the sequence's text was committed before the window
  bool text_end = true;     // the sequence ends with the window
};

struct DecodeResult {
  std::string text;
  // False when a later token could still change this text: an unfinished run of byte-fallback
  // tokens, an unfinished UTF-8 sequence, or a leading or trailing strip not yet decided. Only
  // set when the window does not end the sequence.
  bool complete = true;
};

class Decoder {
 public:
  // `decoder` may be null: token strings joined with spaces, as Hugging Face does.
  static Decoder from_json(const detail::Json& decoder, const detail::JsonAt& at);

  DecodeResult decode(std::vector<std::string> tokens, const DecodeWindow& window) const;

 private:
  struct Step {
    enum class Kind { kReplace, kByteFallback, kFuse, kStrip, kByteLevel, kMetaspace } kind;
    std::string pattern;      // Replace: what is replaced; Metaspace: the replacement character
    std::string content;      // Replace: what replaces it
    char32_t strip_char = 0;  // Strip
    size_t strip_start = 0;   // Strip: at most this many leading strip_char removed
    size_t strip_stop = 0;    // ... and this many trailing
    bool prepend = true;      // Metaspace: prepend_scheme is not "never"
  };
  void add(const detail::Json& decoder, const detail::JsonAt& at);

  bool join_with_spaces_ = false;
  std::vector<Step> steps_;
};

}  // namespace fp4::tokenizer
