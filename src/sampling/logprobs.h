// Logprobs of the raw logits (vLLM's raw_logprobs): the convention is stated in sampler.h.
#pragma once

#include <cstdint>
#include <span>

#include "sampling/sampler.h"

namespace fp4::sampling {

// log_softmax of one raw row, computed as sampler.h defines it.
class RawLogprobs {
 public:
  // The row must hold at least one finite value, no NaN and no +inf.
  explicit RawLogprobs(std::span<const float> logits);

  float operator()(int32_t token) const;

 private:
  std::span<const float> logits_;
  double max_ = 0.0;
  double log_sum_ = 0.0;
};

// Sets result.logprob and result.rank for result.token, and result.top_logprobs to the best
// `num_top` tokens (logprob descending, id ascending).
void fill_logprobs(std::span<const float> logits, int num_top, SampleResult& result);

}  // namespace fp4::sampling
