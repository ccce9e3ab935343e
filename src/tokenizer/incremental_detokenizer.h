// Streaming detokenization: ids go in one at a time, and each push returns only text that no
// later id can change, so that the pushes' outputs plus finish() concatenate to exactly
// Tokenizer::decode(all ids). Text is held back while a UTF-8 character is unfinished, while a
// run of byte-fallback tokens is open (Hugging Face decodes such a run as a whole: its text, or
// one U+FFFD per byte when the run is not valid UTF-8), and while the leading space that the
// SentencePiece decoder strips from the start of a sequence is not yet decided.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fp4::tokenizer {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special_tokens);

  // The new complete text (often empty while a character is unfinished).
  std::string push(int32_t id);
  // Ends the sequence and returns what was held back, rendered as decode() renders it.
  std::string finish();

 private:
  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  // Token strings since the last commit. They are decoded again as each id arrives: held-back
  // windows are a few tokens long in practice (one character is at most four byte tokens).
  std::vector<std::string> window_;
  bool committed_ = false;  // some window of this sequence was emitted already
};

}  // namespace fp4::tokenizer
