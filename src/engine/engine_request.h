// What a client asks the serving engine for, and what it gets back after each step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sampling/sampling_params.h"

namespace fp4::engine {

using RequestId = int64_t;

struct EngineRequest {
  std::vector<int32_t> prompt;  // token ids, at least one
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;  // EOS and stop_token_ids are masked out of the logits before this many
  sampling::SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS; excluded from the text
  std::vector<std::string> stop;        // stop strings, found in the detokenized text
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
};

// One sampled token, with the logprobs the request asked for.
struct TokenOutput {
  int32_t token = -1;
  float logprob = 0.0f;
  int rank = 0;
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort"; null for kNone

// A request's news from one step: normally one token and the text it completed. The text
// deltas of a request concatenate to its output text: stop strings are cut out (unless asked
// for), the tail that could still begin a stop string is held back until it cannot, and the
// text of a stopping EOS or stop token is not included (vLLM's rules).
struct RequestOutput {
  RequestId id = 0;
  std::vector<TokenOutput> tokens;
  std::string text;
  FinishReason finish_reason = FinishReason::kNone;
  // Why it stopped, when not by EOS or length: the stop token id or the stop string (vLLM's
  // stop_reason).
  std::optional<int32_t> stop_token;
  std::optional<std::string> stop_string;
  std::string error;  // set when the request was ended by a failure of the engine
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  int64_t output_tokens = 0;  // so far, including these

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

}  // namespace fp4::engine
