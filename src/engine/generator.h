// Offline generation for one prompt: the prompt runs through the model in chunks (prefill),
// then one token per step (decode), each step's logits sampled; pages come from the same block
// manager the serving engine uses, so prefix caching and page accounting are exercised here too.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/loaded_model.h"
#include "kvcache/kv_cache_manager.h"
#include "model/forward.h"
#include "sampling/sampler.h"

namespace fp4::engine {

struct GenerateResult;

struct GenerateRequest {
  std::vector<int32_t> prompt;            // token ids, at least one
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;                  // stop tokens cannot be drawn before this many
  sampling::SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;     // besides the model's EOS
  bool ignore_eos = false;
  bool keep_logits = false;                // return every step's logits (tests, fidelity)
  bool keep_selections = false;            // return every step's MSA selection and routing (tests)
  // Another run's choices for this one to take (teacher forcing, for tests that compare two
  // engines' arithmetic on the same discrete choices): its tokens instead of sampled ones (their
  // logprobs, when asked, under this run's logits), and at every step its routed experts and MSA
  // selection, as it returned them with keep_selections. Its prompt must be this one's, with the
  // same tokens run (no other cached prefix); routing is forced on the CPU reference only.
  const GenerateResult* follow = nullptr;
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;             // of each sampled token (raw logits)
  std::vector<float> step_logits;          // [tokens.size(), vocab] when keep_logits
  // Per layer, the blocks the MSA indexer chose for the prompt's last token: [kv_heads, topk]
  // ascending logical block ids padded with -1; empty for dense layers. What a caller needs to
  // see that selection is really sparse and finds what the answer depends on.
  std::vector<std::vector<int32_t>> prompt_selection;
  // With keep_selections, entry i is the selection (as prompt_selection) of the step whose
  // logits chose tokens[i]: the prompt's last token for i = 0, tokens[i - 1] after it.
  std::vector<std::vector<std::vector<int32_t>>> step_selections;
  // With keep_selections, the routed experts, each token's top_k ids ascending: per layer
  // [prompt tokens run (after any cached prefix), top_k] for the prompt (empty for dense
  // layers), and per step, as step_selections, per layer the top_k of that step's token.
  std::vector<std::vector<int32_t>> prompt_routes;
  std::vector<std::vector<std::vector<int32_t>>> step_routes;
  // With keep_selections, per layer the selection of every prompt token run: [kv_heads, prompt
  // tokens run, topk] (empty for dense layers).
  std::vector<std::vector<int32_t>> prompt_selections;
  std::string finish_reason;               // "stop" or "length"
  int64_t cached_prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

struct GeneratorOptions {
  model::CacheFormats cache;
  int64_t num_pages = 0;           // 0: enough for the longest request it is asked to run
  int64_t prefill_chunk = 2048;    // prompt tokens per forward step
  bool enforce_eager = false;      // decode steps op by op, never from a recorded CUDA graph
};

class Generator {
 public:
  Generator(const LoadedModel& model, GeneratorOptions options, int64_t max_total_tokens);

  // on_token(token) runs after each sampled token; returning false stops generation early.
  GenerateResult generate(const GenerateRequest& request,
                          const std::function<bool(int32_t)>& on_token = {});

  const kvcache::KvCacheManager& pages() const { return manager_; }
  const model::ModelRunner& runner() const { return runner_; }

 private:
  model::StepBatch step_for(kvcache::SeqId seq, const std::vector<int32_t>& tokens,
                            int64_t first_position) const;
  // From the step just run, whose batch held `tokens` tokens of one sequence.
  std::vector<std::vector<int32_t>> last_token_selection(int64_t tokens) const;
  // The step's routing, per layer [tokens, top_k], each token's ids sorted.
  std::vector<std::vector<int32_t>> sorted_routes() const;
  // A followed run's choices for prompt tokens [first, first + n) of those it ran, or for the
  // decode step that feeds its token `step` (the choices behind its logits for token step + 1).
  model::ForcedChoices prompt_choices(const GenerateResult& followed, int64_t first, int64_t n) const;
  model::ForcedChoices step_choices(const GenerateResult& followed, int64_t step) const;

  const LoadedModel& model_;
  GeneratorOptions options_;
  model::KvMemory memory_;
  model::ModelRunner runner_;
  kvcache::KvCacheManager manager_;
  kvcache::SeqId next_seq_ = 0;
};

}  // namespace fp4::engine
