#include "scheduler/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace fp4::scheduler {

Scheduler::Scheduler(SchedulerConfig config, kvcache::KvCacheManager& kv)
    : config_(config), kv_(kv) {
  FP4_CHECK(config.max_num_seqs >= 1, "max_num_seqs must be at least 1, got {}",
            config.max_num_seqs);
  FP4_CHECK(config.max_num_batched_tokens >= 1, "max_num_batched_tokens must be at least 1, got {}",
            config.max_num_batched_tokens);
}

void Scheduler::add(RequestId id, std::vector<int32_t> prompt) {
  FP4_CHECK(!prompt.empty(), "request {} has an empty prompt", id);
  FP4_CHECK(!requests_.contains(id), "request {} is already scheduled", id);
  SequenceState s;
  s.id = id;
  s.prompt_tokens = std::ssize(prompt);
  s.tokens = std::move(prompt);
  requests_.emplace(id, std::move(s));
  waiting_.push_back(id);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;

  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    SequenceState& s = state(running_[i]);
    const int64_t n = std::min(std::ssize(s.tokens) - s.num_computed, budget);
    bool self_preempted = false;
    while (!kv_.can_allocate(s.id, n)) {
      const RequestId victim = running_.back();
      preempt(victim);
      out.preempted.push_back(victim);
      if (victim == s.id) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    FP4_CHECK(kv_.allocate(s.id, n), "request {}: allocation failed after can_allocate", s.id);
    out.chunks.push_back({s.id, s.num_computed, n, s.num_computed + n == std::ssize(s.tokens)});
    budget -= n;
  }

  // A step that had to preempt is short of pages: admitting now would only preempt again.
  if (out.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 && std::ssize(running_) < config_.max_num_seqs) {
      SequenceState& s = state(waiting_.front());
      const std::optional<int64_t> hit = kv_.add_sequence(s.id, s.tokens);
      if (!hit) break;
      waiting_.pop_front();
      s.status = RequestStatus::kRunning;
      s.num_computed = *hit;
      if (s.cached_prompt_tokens < 0) s.cached_prompt_tokens = *hit;
      running_.push_back(s.id);
      const int64_t n = std::min(std::ssize(s.tokens) - s.num_computed, budget);
      out.chunks.push_back({s.id, s.num_computed, n, s.num_computed + n == std::ssize(s.tokens)});
      budget -= n;
    }
  }
  out.num_tokens = config_.max_num_batched_tokens - budget;
  return out;
}

void Scheduler::on_step_done(const SchedulerOutput& output) {
  for (const ScheduledChunk& c : output.chunks) {
    SequenceState& s = state(c.id);
    FP4_CHECK(s.status == RequestStatus::kRunning && s.num_computed == c.start,
              "request {}: step result for tokens from {}, but {} are computed", c.id, c.start,
              s.num_computed);
    kv_.append(c.id, std::span(s.tokens).subspan(c.start, c.count));
    s.num_computed += c.count;
  }
}

void Scheduler::append_token(RequestId id, int32_t token) {
  SequenceState& s = state(id);
  FP4_CHECK(s.status == RequestStatus::kRunning && s.num_computed == std::ssize(s.tokens),
            "request {}: a token was sampled before all {} tokens were computed ({})", id,
            s.tokens.size(), s.num_computed);
  s.tokens.push_back(token);
}

void Scheduler::remove(RequestId id) {
  SequenceState& s = state(id);
  if (s.status == RequestStatus::kRunning) {
    kv_.free(id);
    running_.erase(std::find(running_.begin(), running_.end(), id));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  }
  requests_.erase(id);
}

void Scheduler::preempt(RequestId id) {
  SequenceState& s = state(id);
  kv_.free(id);
  running_.erase(std::find(running_.begin(), running_.end(), id));
  s.status = RequestStatus::kWaiting;
  s.num_computed = 0;
  ++s.num_preemptions;
  ++total_preemptions_;
  waiting_.push_front(id);
}

const SequenceState& Scheduler::get(RequestId id) const {
  const auto it = requests_.find(id);
  FP4_CHECK(it != requests_.end(), "no request {}", id);
  return it->second;
}

SequenceState& Scheduler::state(RequestId id) {
  const auto it = requests_.find(id);
  FP4_CHECK(it != requests_.end(), "no request {}", id);
  return it->second;
}

}  // namespace fp4::scheduler
