// What the penalties need to know about one sequence: which tokens its prompt contains and how
// often each token occurs in its output. Sparse (only tokens that occur are stored), so a
// sequence costs memory in proportion to its length, not to the vocabulary.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace fp4::sampling {

class TokenCounts {
 public:
  struct Entry {
    bool in_prompt = false;
    int32_t output_count = 0;
  };

  explicit TokenCounts(int64_t vocab_size);

  // Token ids must lie in [0, vocab_size); an id outside throws fp4::Error naming it.
  void add_prompt(std::span<const int32_t> tokens);
  void add_output(int32_t token);

  int64_t vocab_size() const { return vocab_size_; }
  int64_t num_output_tokens() const { return num_output_; }
  bool in_prompt(int32_t token) const;
  int32_t output_count(int32_t token) const;

  // Distinct tokens of the prompt or the output in first-seen order, and their entries (same
  // index). The penalties visit only these.
  std::span<const int32_t> seen_tokens() const { return tokens_; }
  std::span<const Entry> seen_entries() const { return entries_; }

 private:
  Entry& entry(int32_t token, const char* what);

  int64_t vocab_size_;
  int64_t num_output_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<Entry> entries_;
  std::unordered_map<int32_t, uint32_t> index_;  // token -> position in tokens_/entries_
};

}  // namespace fp4::sampling
