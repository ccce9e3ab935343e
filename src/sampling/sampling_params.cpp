#include "sampling/sampling_params.h"

#include <cmath>
#include <random>

#include "core/check.h"

namespace fp4::sampling {

void SamplingParams::validate() const {
  // Written as "in range" tests so that NaN fails them.
  FP4_CHECK(std::isfinite(temperature) && temperature >= 0.0f,
            "SamplingParams: temperature must be non-negative and finite, got {}", temperature);
  FP4_CHECK(top_p > 0.0f && top_p <= 1.0f, "SamplingParams: top_p must be in (0, 1], got {}", top_p);
  FP4_CHECK(top_k >= -1, "SamplingParams: top_k must be 0 or -1 (disable), or at least 1, got {}",
            top_k);
  FP4_CHECK(min_p >= 0.0f && min_p <= 1.0f, "SamplingParams: min_p must be in [0, 1], got {}", min_p);
  FP4_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f,
            "SamplingParams: repetition_penalty must be finite and greater than zero, got {}",
            repetition_penalty);
  FP4_CHECK(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
            "SamplingParams: frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  FP4_CHECK(presence_penalty >= -2.0f && presence_penalty <= 2.0f,
            "SamplingParams: presence_penalty must be in [-2, 2], got {}", presence_penalty);
  FP4_CHECK(logprobs >= -1 && logprobs <= kMaxLogprobs,
            "SamplingParams: logprobs must be -1 (none) or in [0, {}] (the max allowed), got {}",
            kMaxLogprobs, logprobs);
}

uint64_t request_seed(const SamplingParams& params) {
  if (params.seed) return *params.seed;
  std::random_device device;
  // random_device yields 32 bits per call; two calls fill the 64-bit seed.
  return (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
}

}  // namespace fp4::sampling
