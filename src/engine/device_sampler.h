// Sampling where the logits are: the rows of one step (LlmEngine's batch, or the Generator's
// one sequence) turned into the backend's sampling op (backend/sample_params.h), so only tokens
// and logprobs come back to the host, not [rows, vocab] logits. The results are the host
// sampler's (sampling::sample), which the op reproduces: the same tokens; logprobs within the
// op's stated bound, and ranks and top ids equal wherever the logprobs are.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "sampling/sampler.h"

namespace fp4::engine {

struct DeviceSampleRequest {
  const sampling::SamplingParams* params = nullptr;
  const sampling::TokenCounts* counts = nullptr;  // visited only when params has penalties
  uint64_t seed = 0;
  int64_t step = 0;
  std::span<const int32_t> banned;  // ids that cannot be drawn now (min_tokens)
};

// logits: [rows.size(), vocab] in the backend's memory. Throws fp4::Error for a row the host
// sampler would refuse too (no finite logit left).
std::vector<sampling::SampleResult> sample_on_device(Backend& backend, const float* logits, int64_t vocab,
                                                     std::span<const DeviceSampleRequest> rows);

}  // namespace fp4::engine
