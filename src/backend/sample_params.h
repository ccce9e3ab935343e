// Contract of the sampling op: one token per row of logits, with the logprobs vLLM returns.
// The numerics are those of fp4::sampling::sample() (src/sampling/sampler.h), which is the
// reference: the CUDA op (backend/cuda/sampler.h) returns its tokens bit for bit, and its ranks
// and top ids wherever its logprobs are the host's (they may differ in the last bits, see
// sampler.h). The structs are plain data so that SampleRow can be copied to the device as it is.
#pragma once

#include <cstdint>

namespace fp4 {

inline constexpr int kMaxSampleLogprobs = 20;  // == sampling::kMaxLogprobs (vLLM's max_logprobs)
inline constexpr float kSampleGreedyBelow = 1e-5f;  // == sampling::kSamplingEps (vLLM's _SAMPLING_EPS)

// One row's request. Fields must satisfy SamplingParams::validate()'s ranges (the engine
// validates a request once, at admission); a row that breaks them, or that the host sampler
// would refuse (no finite value after banning, penalties and temperature), gets token -1.
struct SampleRow {
  float temperature = 1.0f;  // < kSampleGreedyBelow: greedy; else logits / temperature
  int32_t top_k = -1;        // -1, 0 or >= vocab: off (below -1: refused); else keep x >= the k-th largest x
  float top_p = 1.0f;        // (0, 1]; 1: off
  float min_p = 0.0f;        // [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // > 0; 1: off
  float frequency_penalty = 0.0f;   // times the token's count in the output
  float presence_penalty = 0.0f;    // once, when the token is in the output
  int32_t logprobs = -1;     // -1: none; 0: the sampled token's logprob and rank; k <= 20: also the top k
  uint64_t seed = 0;         // the request's stream (sampling::request_seed)
  int64_t step = 0;          // tokens the request sampled before this one; >= 0
  int32_t seen_begin = 0, seen_count = 0;      // this row's entries in SampleParams::seen_*
  int32_t banned_begin = 0, banned_count = 0;  // ids whose raw logit is taken as -inf (vLLM min_tokens),
                                               // before everything else, logprobs included
};

struct SampleParams {
  const float* logits = nullptr;  // [rows, vocab], row-major; not modified
  int64_t rows = 0, vocab = 0;    // rows >= 0, 0 < vocab <= 2^23 (sampling::kMaxVocab)
  const SampleRow* row = nullptr;  // [rows]
  // The TokenCounts entries of all rows, concatenated (row i's at [seen_begin, seen_begin +
  // seen_count)): distinct ids per row, as TokenCounts::seen_tokens() gives them; ids outside
  // [0, vocab) are skipped. May be null when every row's seen_count is 0.
  const int32_t* seen_tokens = nullptr;
  const int32_t* seen_output_counts = nullptr;  // the token's count in the output
  const uint8_t* seen_in_prompt = nullptr;      // nonzero: the token is in the prompt
  // Banned ids of all rows, concatenated; ids outside [0, vocab) are skipped, repeats are
  // harmless. May be null when every row's banned_count is 0.
  const int32_t* banned = nullptr;
  float* scratch = nullptr;  // [rows, vocab] floats the op overwrites (the scaled, penalized row)
  // Outputs, all written for every row.
  int32_t* token = nullptr;         // [rows]; -1: the row was refused (see SampleRow)
  float* logprob = nullptr;         // [rows] raw logprob of token when row.logprobs >= 0, else 0
  int32_t* rank = nullptr;          // [rows] 1-based, 0 when logprobs were not requested
  int32_t* top_ids = nullptr;       // [rows, kMaxSampleLogprobs], -1 beyond row.logprobs (and vocab)
  float* top_logprobs = nullptr;    // [rows, kMaxSampleLogprobs], 0 where top_ids is -1
};

// Host-side shape checks: 0 <= rows < 2^31, 0 < vocab <= 2^23, and, when rows > 0, every
// pointer but the seen and banned arrays (which live on the device with the row counts) set.
// Throws fp4::Error naming the field.
void check_sample_params(const SampleParams& p);

}  // namespace fp4
