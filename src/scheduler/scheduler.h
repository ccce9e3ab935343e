// Continuous batching: which tokens of which requests run in the next forward step.
//
// Each request is a token list (its prompt, then the tokens sampled so far) of which the first
// num_computed have K/V in the cache. A step computes a slice of each scheduled request's
// remaining tokens: a chunk of the prompt (chunked prefill) or the one token sampled last
// (decode). The policy is vLLM V1's:
//   1. Running requests first, oldest first, each as much as the token budget still allows, so
//      decodes are never starved by a long prompt. A request that needs a page the pool cannot
//      give preempts the newest running request (its pages are freed; it is recomputed later)
//      until the page fits, or preempts itself when it is the newest.
//   2. Then, if nothing was preempted this step, waiting requests in arrival order while the
//      budget, max_num_seqs and the pool allow. Admission takes the longest cached prefix and
//      allocates pages for all the rest of the request's tokens at once, so a prompt admitted is
//      a prompt that will finish prefilling. A waiting request that does not fit blocks those
//      behind it (first come, first served).
// A preempted request goes back to the head of the queue keeping its sampled tokens; when it is
// admitted again they are part of its "prompt", and the prefix cache often hands back the pages
// it just released.
//
// Pure host code on a KvCacheManager: the engine runs the model, and the scheduler is tested
// with a fake runner (tests/unit/scheduler).
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "kvcache/kv_cache_manager.h"

namespace fp4::scheduler {

using RequestId = kvcache::SeqId;

struct SchedulerConfig {
  int64_t max_num_seqs = 256;             // requests running at once
  int64_t max_num_batched_tokens = 2048;  // tokens per step, prefill and decode together
};

enum class RequestStatus { kWaiting, kRunning };

struct SequenceState {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // the prompt, then the sampled tokens
  int64_t prompt_tokens = 0;
  int64_t num_computed = 0;     // leading tokens whose K/V are in the cache
  int64_t cached_prompt_tokens = -1;  // prefix-cache hit of the first admission; -1 before it
  int64_t num_preemptions = 0;
  RequestStatus status = RequestStatus::kWaiting;

  int64_t num_output_tokens() const { return std::ssize(tokens) - prompt_tokens; }
};

// `count` tokens of request `id` starting at token `start` run in this step. `samples`: the
// chunk ends at the request's last token, so the step's logits for it give the next token.
struct ScheduledChunk {
  RequestId id = 0;
  int64_t start = 0;
  int64_t count = 0;
  bool samples = false;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;  // running requests first, then those admitted
  std::vector<RequestId> preempted;    // in this step, newest first
  int64_t num_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, kvcache::KvCacheManager& kv);

  // Queues a new request. The caller has checked that it can ever fit: its prompt plus the
  // tokens it may sample need at most the pool's pages.
  void add(RequestId id, std::vector<int32_t> prompt);
  SchedulerOutput schedule();
  // After the step's forward pass wrote the K/V of every chunk: records them as computed (full
  // pages become prefix-cache entries).
  void on_step_done(const SchedulerOutput& output);
  // The token sampled for a request whose chunk had `samples` set.
  void append_token(RequestId id, int32_t token);
  // Finished or aborted, waiting or running: forgets the request and frees its pages now.
  void remove(RequestId id);

  const SequenceState& get(RequestId id) const;
  bool contains(RequestId id) const { return requests_.contains(id); }
  int64_t num_waiting() const { return std::ssize(waiting_); }
  int64_t num_running() const { return std::ssize(running_); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  int64_t total_preemptions() const { return total_preemptions_; }
  const SchedulerConfig& config() const { return config_; }
  const kvcache::KvCacheManager& kv() const { return kv_; }

 private:
  void preempt(RequestId id);
  SequenceState& state(RequestId id);

  SchedulerConfig config_;
  kvcache::KvCacheManager& kv_;
  std::unordered_map<RequestId, SequenceState> requests_;
  std::deque<RequestId> waiting_;
  std::vector<RequestId> running_;  // in admission order: the back is the newest
  int64_t total_preemptions_ = 0;
};

}  // namespace fp4::scheduler
