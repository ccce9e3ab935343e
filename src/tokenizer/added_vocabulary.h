// Added tokens (tokenizer.json's "added_tokens": <s>, <|im_start|>, ...): found in the input
// before the model sees it and mapped straight to their ids, the way Hugging Face's
// AddedVocabulary does it: leftmost-longest matching, first on the raw text for tokens with
// normalized=false, then on each normalized stretch for tokens with normalized=true.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenize.h"

namespace fp4::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;  // match only where no word character touches it
  bool lstrip = false;       // the match swallows the whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool normalized = true;    // matched in normalized text (false: in the raw input)
  bool special = false;      // skipped by decode(skip_special_tokens=true)
};

// A stretch of input: either an added token (id >= 0) or text for the model (id == -1).
struct Segment {
  std::string_view text;
  size_t offset;  // of `text` within the string that was split
  int32_t id;
};

class AddedVocabulary {
 public:
  // `tokens` in file order. `normalizer` turns the content of normalized tokens into the text
  // they match.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer& normalizer);
  AddedVocabulary() = default;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Cuts `text` around the matches of the raw (normalized=false) or the normalized tokens.
  // Segments of text are never empty; an empty input gives no segment.
  std::vector<Segment> split(std::string_view text, bool normalized) const;

 private:
  // A byte trie over the contents of one matching set.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token = -1;                                 // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    void insert(std::string_view key, int32_t token);
    // The longest key starting at text[pos]: its token index and length, or {-1, 0}.
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  Trie raw_;
  Trie normalized_;
};

}  // namespace fp4::tokenizer
