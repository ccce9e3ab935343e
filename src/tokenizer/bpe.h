// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): a vocabulary, ranked merges,
// and, for SentencePiece-style files, byte fallback (<0x0A> tokens) and the unknown token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_fields.h"

namespace fp4::tokenizer {

// Hashing std::string keys by std::string_view, so that lookups do not allocate.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  static BpeModel from_json(const detail::Json& model, const detail::JsonAt& at);

  // Appends the ids of one pre-tokenized word. Merges are applied lowest rank first (leftmost
  // on ties) with a priority queue, so a word of n characters costs O(n log n).
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr when the id has no token
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_id_;    // ids may have gaps
  std::vector<int32_t> byte_ids_;  // <0x00>..<0xFF>, -1 where absent; empty without byte fallback
  std::unordered_map<uint64_t, Merge> merges_;
  std::string unk_token_;  // empty: no unknown token
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string where_;  // the model's place in the file, for errors raised while encoding
};

}  // namespace fp4::tokenizer
