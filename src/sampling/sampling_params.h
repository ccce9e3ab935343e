// Per-request sampling parameters, with vLLM's meanings and limits. The whole pipeline that
// consumes them is described in sampler.h; docs/sampling.md has the summary.
#pragma once

#include <cstdint>
#include <optional>

namespace fp4::sampling {

// vLLM's _SAMPLING_EPS: a temperature below it means greedy decoding.
inline constexpr float kSamplingEps = 1e-5f;
// vLLM's default max_logprobs: the most alternatives a request may ask for.
inline constexpr int kMaxLogprobs = 20;

struct SamplingParams {
  float temperature = 1.0f;         // < kSamplingEps: greedy; otherwise logits / temperature
  int top_k = -1;                   // 0 or -1: off; k >= 1 keeps tokens at or above the k-th logit
  float top_p = 1.0f;               // (0, 1]; 1: off
  float min_p = 0.0f;               // [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // > 0; 1: off; prompt and output tokens
  float frequency_penalty = 0.0f;   // [-2, 2]; times the count of the token in the output
  float presence_penalty = 0.0f;    // [-2, 2]; once if the token is in the output
  std::optional<uint64_t> seed;     // none: the engine draws one per request (request_seed)
  int logprobs = -1;                // -1: none; 0: the sampled token's; k: also the top k

  // Throws fp4::Error naming the first field out of range and its allowed range.
  void validate() const;

  bool is_greedy() const { return temperature < kSamplingEps; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
};

// The seed of a request's random stream: params.seed when given, else one draw from
// std::random_device. Call once per request and keep the result for the request's lifetime, so
// a preempted request resumes the same stream.
uint64_t request_seed(const SamplingParams& params);

}  // namespace fp4::sampling
