// A first-principles estimate of the activation memory one forward step needs on one GPU, used
// to reserve memory before the KV pool takes the rest. An engine measures this with a profile
// run instead; the planner cannot, so it counts the largest tensors that are alive at once.
#pragma once

#include <cstdint>
#include <string_view>

#include "model/config.h"

namespace fp4::model {

struct ActivationInputs {
  int64_t max_num_batched_tokens = 8192;  // tokens in the largest step (chunked prefill)
  int64_t max_num_seqs = 256;             // sequences sampled in one step
  int64_t max_model_len = 0;              // sizes the indexer's per-block score buffer
  int tp = 1;                             // tensor-parallel GPUs per data-parallel rank
};

struct ActivationEstimate {
  int64_t residual = 0;   // residual stream and normalized input, BF16
  int64_t attention = 0;  // projections, attention output, FP32 index-block scores
  int64_t moe = 0;        // routed token copies through gate/up, activation, down; router logits
  int64_t dense_mlp = 0;
  int64_t logits = 0;     // BF16 logits, their FP32 copy and FP32 probabilities
  int64_t peak = 0;       // residual + the largest of the other phases
  std::string_view peak_phase;
};

ActivationEstimate estimate_activations(const ModelConfig& config, const ActivationInputs& in);

}  // namespace fp4::model
