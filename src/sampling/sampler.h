// Choosing the next token of each sequence from one row of FP32 logits, as vLLM does. This host
// code is the reference the CUDA sampler is tested against, so every step is defined exactly,
// in this order (l: the row, V: its length, all arithmetic IEEE, no FMA contraction):
//
// 1. Penalties (apply_penalties), only to tokens the sequence has seen:
//    a. repetition: a token in the prompt or the output gets l > 0 ? l / r : l * r;
//    b. frequency:  l = l - f * float(count of the token in the output);
//    c. presence:   l = l - p, when the token occurs in the output.
// 2. temperature < kSamplingEps: greedy, the argmax of the penalized row, ties to the lowest
//    id; top-k/top-p/min-p and the random stream are not used. Otherwise x = l / temperature.
// 3. Weights. m = max x (must be finite). Each token's weight is an integer
//    (backend/sampling_weights.h),
//        w(x) = floor(weight_exp(double(x) - double(m)) * 2^40),  weight_exp(d) ~ e^d,
//    so the argmax weighs exactly 2^40 and a token more than ~27.7 below m weighs 0 and is
//    never drawn. Every sum of weights below is a sum of integers: exact, the same in any
//    order, which is what lets a parallel GPU reduction reproduce it.
// 4. Filters, in this order, each on the survivors of the previous one:
//    a. top-k (0 < k < V): keep x >= the k-th largest x; ties with it are all kept (vLLM).
//    b. top-p (< 1): order the survivors by (x descending, id ascending), C_j = the sum of the
//       weights of the first j+1; keep the first j with double(C_j) >= double(top_p) *
//       double(W), W their total, and everything before it: the smallest prefix whose mass
//       reaches top_p, at least one token.
//    c. min-p (> 0): keep double(w) >= double(min_p) * 2^40, i.e. prob >= min_p * max prob.
//    (vLLM's V1 engine applies min-p before top-k/top-p; docs/sampling.md lists the
//    differences.)
// 5. Draw: W = the survivors' total weight, r = uniform_below(random_bits(seed, step), W)
//    (backend/sampling_rng.h); the token is the first survivor, in ascending id, whose running
//    weight sum exceeds r. Its probability is w / W.
//
// Logprobs (params.logprobs >= 0) come from the raw row, before penalties and temperature
// (vLLM's raw_logprobs): M = max l, S = sum over ids in ascending order of exp(double(l) - M)
// in double, and logprob(i) = float((double(l_i) - M) - log(S)). rank = 1 + the number of
// tokens with a strictly higher logprob; top_logprobs are the `logprobs` best by (logprob
// descending, id ascending).
//
// Rows must hold no NaN and no +inf; -inf marks a token that cannot be chosen. Thread-safe:
// scratch memory is per thread.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/sampling_weights.h"
#include "sampling/sampling_params.h"
#include "sampling/token_counts.h"

namespace fp4::sampling {

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;  // raw logprob of `token`; meaningful when params.logprobs >= 0
  int rank = 0;          // 1-based; 0 when logprobs were not requested
  std::vector<std::pair<int32_t, float>> top_logprobs;  // params.logprobs entries at most
};

// One row of a batch: the request's parameters, its token counts, its stream seed
// (request_seed) and its step (tokens sampled so far). Pointers must outlive the call.
struct SampleRequest {
  const SamplingParams* params = nullptr;
  const TokenCounts* counts = nullptr;
  uint64_t seed = 0;
  int64_t step = 0;
};

// Step 1 in place on one row of counts.vocab_size() logits.
void apply_penalties(std::span<float> logits, const SamplingParams& params, const TokenCounts& counts);

// The exact distribution sample() draws from (steps 1-4): V probabilities w / W in double; one-hot
// on the argmax for greedy. For tests and for checking other implementations.
std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                                          const TokenCounts& counts);

// Steps 1-5 plus the logprobs of one row.
SampleResult sample(std::span<const float> logits, const SamplingParams& params,
                    const TokenCounts& counts, uint64_t seed, int64_t step);

// sample() on each row of logits [rows.size(), vocab_size], rows spread over threads with
// parallel_for (0: default_num_threads()). Results are those of sample() row by row.
std::vector<SampleResult> sample_batch(std::span<const float> logits, int64_t vocab_size,
                                       std::span<const SampleRequest> rows, int num_threads = 0);

}  // namespace fp4::sampling
