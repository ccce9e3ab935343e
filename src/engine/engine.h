// The serving engine's step: many requests advance together through one forward pass per
// step. The scheduler decides which tokens run (chunked prefill, decode first, preemption);
// the engine builds the step's batch from the block tables, runs the model, samples the
// requests whose chunk ended at their last token, and applies the stop rules.
//
// Single-threaded: one thread owns an LlmEngine (AsyncEngine runs it on its own thread).
// Sampling is per request and seeded per request, with the step number of the request's own
// output, so a request's tokens do not depend on what it was batched with.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/engine_metrics.h"
#include "engine/engine_request.h"
#include "engine/loaded_model.h"
#include "engine/output_text.h"
#include "kvcache/kv_cache_manager.h"
#include "model/forward.h"
#include "sampling/sampler.h"
#include "sampling/token_counts.h"
#include "scheduler/scheduler.h"
#include "tokenizer/incremental_detokenizer.h"

namespace fp4::engine {

struct EngineConfig {
  model::CacheFormats cache;
  int64_t num_pages = 0;      // KV pool size, in pages of kvcache::kPageTokens tokens
  int64_t max_model_len = 0;  // prompt + output tokens of one request; 0: the model's context
  scheduler::SchedulerConfig scheduler;
  bool enforce_eager = false;  // decode steps op by op, never from a recorded CUDA graph
  // Sample with the host sampler even where the backend samples on the device: the reference,
  // for checking the device's sampling on the same logits.
  bool sample_on_host = false;
};

class LlmEngine {
 public:
  LlmEngine(const LoadedModel& model, EngineConfig config);

  // Throws fp4::Error (the message names the field and the numbers) when the request can never
  // run: empty prompt, ids outside the vocabulary, longer than max_model_len, more pages than
  // the pool has, bad sampling parameters. Const and touching no mutable state, so any thread
  // may call it.
  void validate(const EngineRequest& request) const;
  // Queues a request (validated here again). `arrival` is when the client sent it (TTFT and
  // end-to-end latency are measured from it).
  void add_request(RequestId id, EngineRequest request,
                   std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now());
  // Ends a request now, wherever it is, and frees its pages. Returns its final output (finish
  // reason kAbort), or nothing when no such request is active.
  std::optional<RequestOutput> abort(RequestId id);

  // Runs one step; returns the requests that advanced (one output each).
  std::vector<RequestOutput> step();
  bool has_work() const { return scheduler_.has_work(); }
  int64_t num_active() const { return std::ssize(requests_); }

  const EngineMetrics& metrics() const { return metrics_; }
  const EngineConfig& config() const { return config_; }
  const kvcache::KvCacheManager& kv() const { return kv_; }
  const model::ModelRunner& runner() const { return runner_; }
  model::ModelRunner& runner() { return runner_; }

 private:
  struct Active {
    EngineRequest request;
    sampling::TokenCounts counts;
    uint64_t seed = 0;
    std::vector<int32_t> stop_ids;  // EOS (unless ignored) and stop_token_ids
    std::optional<tokenizer::IncrementalDetokenizer> detokenizer;
    OutputText text;
    std::chrono::steady_clock::time_point arrival, last_token;
    int64_t num_output = 0;
  };

  model::StepBatch build_batch(const scheduler::SchedulerOutput& out) const;
  RequestOutput on_token(RequestId id, Active& a, const sampling::SampleResult& s);
  void finish(RequestId id, Active& a, RequestOutput& out);
  void update_gauges();

  const LoadedModel& model_;
  EngineConfig config_;
  model::KvMemory memory_;
  model::ModelRunner runner_;
  kvcache::KvCacheManager kv_;
  scheduler::Scheduler scheduler_;
  std::unordered_map<RequestId, Active> requests_;
  EngineMetrics metrics_;
};

}  // namespace fp4::engine
