#include "sampling/token_counts.h"

#include "core/check.h"

namespace fp4::sampling {

TokenCounts::TokenCounts(int64_t vocab_size) : vocab_size_(vocab_size) {
  FP4_CHECK(vocab_size > 0, "TokenCounts: vocab_size must be positive, got {}", vocab_size);
}

TokenCounts::Entry& TokenCounts::entry(int32_t token, const char* what) {
  FP4_CHECK(token >= 0 && token < vocab_size_, "TokenCounts: {} token id {} is outside [0, {})", what,
            token, vocab_size_);
  auto [it, inserted] = index_.try_emplace(token, static_cast<uint32_t>(tokens_.size()));
  if (inserted) {
    tokens_.push_back(token);
    entries_.emplace_back();
  }
  return entries_[it->second];
}

void TokenCounts::add_prompt(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) entry(t, "prompt").in_prompt = true;
}

void TokenCounts::add_output(int32_t token) {
  ++entry(token, "output").output_count;
  ++num_output_;
}

bool TokenCounts::in_prompt(int32_t token) const {
  auto it = index_.find(token);
  return it != index_.end() && entries_[it->second].in_prompt;
}

int32_t TokenCounts::output_count(int32_t token) const {
  auto it = index_.find(token);
  return it == index_.end() ? 0 : entries_[it->second].output_count;
}

}  // namespace fp4::sampling
