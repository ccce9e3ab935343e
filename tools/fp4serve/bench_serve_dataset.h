// The `random` dataset of `fp4serve bench serve`: prompts of random token ids with lengths drawn
// as `vllm bench serve` draws them, and an optional prefix shared by every prompt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/fp4serve/bench_serve_random.h"

namespace fp4::tokenizer {
class Tokenizer;
}

namespace fp4::bench_serve {

struct RandomDatasetSpec {
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0.0;
  int64_t prefix_len = 0;
};

// An inclusive integer range.
struct LengthRange {
  int64_t lo = 0;
  int64_t hi = 0;
};

// vLLM's semantics: uniform over the integers of [floor(L(1-r)), ceil(L(1+r))], r in [0, 1).
// (SGLang's flag of the same name means [L*r, L].) Output lengths are at least 1.
LengthRange input_len_range(int64_t input_len, double range_ratio);
LengthRange output_len_range(int64_t output_len, double range_ratio);

struct Prompt {
  // The ids the prompt is made of: sent as they are to /v1/completions.
  std::vector<int32_t> ids;
  // For the chat endpoint only: the ids decoded to text (empty otherwise).
  std::string text;
  // Prompt tokens by the client's count: ids.size(), or for text the length of its re-encoding.
  int64_t input_len = 0;
  int64_t output_len = 0;
};

struct Dataset {
  std::vector<Prompt> prompts;
  std::vector<int32_t> prefix;  // shared by every prompt, at its start
  // For text prompts: the number of prompts whose re-encoded length still differs from the
  // target after the retries, and the sum of |difference|.
  int64_t length_mismatches = 0;
  int64_t mismatch_tokens = 0;
};

// The ids prompts are drawn from: [0, vocab_size) without a tokenizer; with one, every id of
// [0, tokenizer.vocab_size()) that names a token and is not special.
std::vector<int32_t> allowed_ids(int32_t vocab_size, const tokenizer::Tokenizer* tokenizer);

// Draws, in this order from `rng`: every input length, every output length, the shared prefix,
// then each prompt's own ids, each uniform over `allowed`. A prompt is prefix + its own ids, so
// its length is prefix_len + the drawn input length. With `text_tokenizer` (the chat backend)
// each prompt is also decoded to text; as vLLM does, the text is re-encoded and the ids are cut
// or extended (with more random ids) until the re-encoding has the target length, at most ten
// times.
Dataset make_random_dataset(const RandomDatasetSpec& spec, const std::vector<int32_t>& allowed,
                            Rng& rng, const tokenizer::Tokenizer* text_tokenizer);

}  // namespace fp4::bench_serve
