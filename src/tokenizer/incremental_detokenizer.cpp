#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/decoder.h"

namespace fp4::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  const std::string* token = tokenizer_.decode_piece(id, skip_special_tokens_);
  if (token == nullptr) return {};
  window_.push_back(*token);
  const DecodeWindow where{
      .first_token = !committed_, .text_start = !committed_, .text_end = false};
  DecodeResult result = tokenizer_.decoder().decode(window_, where);
  if (!result.complete) return {};
  window_.clear();
  committed_ = true;
  return std::move(result.text);
}

std::string IncrementalDetokenizer::finish() {
  if (window_.empty()) return {};
  const DecodeWindow where{.first_token = !committed_, .text_start = !committed_, .text_end = true};
  std::string text = tokenizer_.decoder().decode(std::move(window_), where).text;
  window_.clear();
  committed_ = true;
  return text;
}

}  // namespace fp4::tokenizer
