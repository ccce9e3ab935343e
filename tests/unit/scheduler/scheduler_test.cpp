// The scheduler under random workloads, with a fake model in place of the forward pass. The
// fake "K/V cache" remembers which token each slot of each page holds, so every step checks
// what attention would read: every earlier token of the sequence, at its position, through the
// block table (prefix hits included), and that a step only ever writes into pages the sequence
// holds alone. The fake model's next token is a hash of the whole sequence, so a request's
// output is a function of its prompt alone: under any batching, preemption and prefix sharing it
// must equal the same request run by itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/int_math.h"
#include "scheduler/scheduler.h"
#include "tests/support/random.h"

namespace fp4::scheduler {
namespace {

constexpr int32_t kVocab = 5;
constexpr int32_t kEos = 0;

int32_t next_token(std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ static_cast<uint64_t>(t + 7)) * 1099511628211ull;
  return static_cast<int32_t>((h >> 29) % kVocab);
}

struct Job {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 1;
};

std::vector<int32_t> run_alone(const Job& job) {
  std::vector<int32_t> tokens = job.prompt, out;
  while (std::ssize(out) < job.max_tokens) {
    const int32_t t = next_token(tokens);
    out.push_back(t);
    tokens.push_back(t);
    if (t == kEos) break;
  }
  return out;
}

class FakeModel {
 public:
  FakeModel(int32_t num_pages, int page_tokens)
      : slots_(num_pages, std::vector<int32_t>(page_tokens, -1)), P_(page_tokens) {}

  // Writes the chunks' tokens into their pages and returns the next token of each chunk that
  // samples.
  std::map<RequestId, int32_t> step(const Scheduler& s, const SchedulerOutput& out) {
    std::map<RequestId, int32_t> sampled;
    for (const ScheduledChunk& c : out.chunks) {
      const SequenceState& seq = s.get(c.id);
      const auto& pages = s.kv().block_table(c.id).pages;
      for (int64_t pos = c.start; pos < c.start + c.count; ++pos) {
        const kvcache::PageId page = pages.at(pos / P_);
        EXPECT_EQ(s.kv().pool().refcount(page), 1)
            << "request " << c.id << " writes position " << pos << " into shared page " << page;
        slots_[page][pos % P_] = seq.tokens[pos];
      }
      const int64_t end = c.start + c.count;
      for (int64_t pos = 0; pos < end; ++pos) {
        if (slots_[pages.at(pos / P_)][pos % P_] != seq.tokens[pos]) {
          ADD_FAILURE() << "request " << c.id << " would attend to the wrong K/V at position " << pos;
          return sampled;
        }
      }
      if (c.samples) sampled[c.id] = next_token(std::span(seq.tokens).first(end));
    }
    return sampled;
  }

 private:
  std::vector<std::vector<int32_t>> slots_;
  int P_;
};

void expect_refcounts_match_tables(const Scheduler& s, const std::vector<RequestId>& live) {
  std::map<kvcache::PageId, int32_t> holders;
  for (RequestId id : live) {
    if (s.get(id).status != RequestStatus::kRunning) continue;
    for (kvcache::PageId p : s.kv().block_table(id).pages) ++holders[p];
  }
  const kvcache::BlockPool& pool = s.kv().pool();
  for (kvcache::PageId p = 0; p < pool.num_pages(); ++p) {
    const auto it = holders.find(p);
    ASSERT_EQ(pool.refcount(p), it == holders.end() ? 0 : it->second) << "page " << p;
  }
}

struct WorkloadStats {
  int64_t preemptions = 0;
  int64_t prefix_hits = 0;
  int64_t aborted = 0;
};

// Requests arrive over the first steps, a few are aborted at random moments, and the pool is
// small enough that decodes run out of pages.
WorkloadStats run_workload(uint64_t salt, int32_t num_pages, int page_tokens,
                           SchedulerConfig config) {
  auto rng = testing::seeded_rng(salt);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<std::vector<int32_t>> documents;
  for (int d = 0; d < 3; ++d) {
    std::vector<int32_t> doc;
    for (int i = 0; i < 8 * page_tokens; ++i) doc.push_back(static_cast<int32_t>(uniform(1, kVocab - 1)));
    documents.push_back(doc);
  }
  const int64_t capacity = int64_t{num_pages} * page_tokens;
  std::vector<Job> jobs(40);
  for (Job& j : jobs) {
    const auto& doc = documents[uniform(0, 2)];
    j.prompt.assign(doc.begin(), doc.begin() + uniform(0, std::ssize(doc)));
    for (int64_t n = uniform(1, 3 * page_tokens); n > 0; --n) {
      j.prompt.push_back(static_cast<int32_t>(uniform(0, kVocab - 1)));
    }
    j.max_tokens = uniform(1, 4 * page_tokens);
    // What the engine checks before queueing: the longest the request can get fits the pool.
    const int64_t longest = std::ssize(j.prompt) + j.max_tokens - 1;
    if (longest > capacity) j.max_tokens = std::max<int64_t>(1, capacity - std::ssize(j.prompt) + 1);
    if (std::ssize(j.prompt) > capacity) j.prompt.resize(capacity);
  }

  kvcache::KvCacheManager kv(num_pages, kvcache::PrefixHashKey{salt, ~salt}, page_tokens);
  Scheduler s(config, kv);
  FakeModel model(num_pages, page_tokens);
  std::map<RequestId, std::vector<int32_t>> outputs;
  std::set<RequestId> aborted;
  std::vector<RequestId> live;
  size_t next_job = 0;
  WorkloadStats stats;

  for (int step = 0; step < 100000 && (next_job < jobs.size() || s.has_work()); ++step) {
    for (int64_t k = uniform(0, 3); k > 0 && next_job < jobs.size(); --k, ++next_job) {
      s.add(static_cast<RequestId>(next_job), jobs[next_job].prompt);
      live.push_back(static_cast<RequestId>(next_job));
    }
    if (!live.empty() && uniform(0, 40) == 0) {
      const RequestId victim = live[uniform(0, std::ssize(live) - 1)];
      s.remove(victim);
      aborted.insert(victim);
      live.erase(std::find(live.begin(), live.end(), victim));
      ++stats.aborted;
    }
    const SchedulerOutput out = s.schedule();
    EXPECT_LE(out.num_tokens, config.max_num_batched_tokens);
    EXPECT_LE(s.num_running(), config.max_num_seqs);
    std::set<RequestId> in_step;
    for (const ScheduledChunk& c : out.chunks) EXPECT_TRUE(in_step.insert(c.id).second);
    if (s.has_work() && s.num_running() > 0) {
      EXPECT_FALSE(out.empty()) << "running requests but nothing scheduled at step " << step;
    }
    const std::map<RequestId, int32_t> sampled = model.step(s, out);
    if (::testing::Test::HasFailure()) return stats;
    s.on_step_done(out);
    for (const auto& [id, token] : sampled) {
      s.append_token(id, token);
      std::vector<int32_t>& o = outputs[id];
      o.push_back(token);
      if (token == kEos || std::ssize(o) == jobs[id].max_tokens) {
        if (s.get(id).cached_prompt_tokens > 0) ++stats.prefix_hits;
        s.remove(id);
        live.erase(std::find(live.begin(), live.end(), id));
      }
    }
    expect_refcounts_match_tables(s, live);
  }
  EXPECT_FALSE(s.has_work()) << "the workload did not drain";
  for (size_t id = 0; id < jobs.size(); ++id) {
    if (aborted.contains(id)) continue;
    EXPECT_EQ(outputs[id], run_alone(jobs[id])) << "request " << id;
  }
  EXPECT_EQ(kv.pool().num_used(), 0) << "pages leaked";
  stats.preemptions = s.total_preemptions();
  return stats;
}

TEST(Scheduler, RandomWorkloadsMatchRequestsRunAlone) {
  WorkloadStats total;
  for (uint64_t salt = 1; salt <= 24; ++salt) {
    SchedulerConfig config;
    config.max_num_seqs = 1 + static_cast<int64_t>(salt % 7);
    config.max_num_batched_tokens = 3 + static_cast<int64_t>(salt * 5 % 29);
    const int page_tokens = salt % 2 ? 4 : 8;
    const int32_t num_pages = 12 + static_cast<int32_t>(salt % 5) * 6;
    const WorkloadStats s = run_workload(salt, num_pages, page_tokens, config);
    if (HasFailure()) {
      ADD_FAILURE() << "workload " << salt << " failed";
      return;
    }
    total.preemptions += s.preemptions;
    total.prefix_hits += s.prefix_hits;
    total.aborted += s.aborted;
  }
  // The workloads are built to exercise each mechanism; a change that stops them doing so
  // would leave this test checking less than it claims.
  EXPECT_GT(total.preemptions, 0);
  EXPECT_GT(total.prefix_hits, 0);
  EXPECT_GT(total.aborted, 0);
}

TEST(Scheduler, DecodesGoFirstAndPromptsAreChunked) {
  kvcache::KvCacheManager kv(64, kvcache::PrefixHashKey{1, 2}, 4);
  Scheduler s({.max_num_seqs = 4, .max_num_batched_tokens = 6}, kv);
  s.add(0, {1, 2, 3});
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_TRUE(out.chunks[0].samples);
  s.on_step_done(out);
  s.append_token(0, 4);
  s.add(1, std::vector<int32_t>(10, 3));
  out = s.schedule();
  // Request 0 decodes one token; request 1 gets the 5 left of the budget of 6.
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].id, 0);
  EXPECT_EQ(out.chunks[0].count, 1);
  EXPECT_EQ(out.chunks[1].id, 1);
  EXPECT_EQ(out.chunks[1].count, 5);
  EXPECT_FALSE(out.chunks[1].samples);
  s.on_step_done(out);
  s.append_token(0, 1);
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[1].start, 5);
  EXPECT_EQ(out.chunks[1].count, 5);
  EXPECT_TRUE(out.chunks[1].samples);
}

TEST(Scheduler, PreemptsTheNewestAndResumesItFirst) {
  // 3 pages of 4 tokens. Two requests of 4-token prompts each fill a page; their first decode
  // needs a second page each, and only one is left after the first takes it.
  kvcache::KvCacheManager kv(3, kvcache::PrefixHashKey{1, 2}, 4);
  Scheduler s({.max_num_seqs = 4, .max_num_batched_tokens = 64}, kv);
  s.add(0, {1, 2, 3, 4});
  s.add(1, {4, 3, 2, 1});
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  s.on_step_done(out);
  s.append_token(0, 1);
  s.append_token(1, 2);
  out = s.schedule();
  EXPECT_EQ(out.preempted, std::vector<RequestId>{1});
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].id, 0);
  EXPECT_EQ(s.get(1).status, RequestStatus::kWaiting);
  EXPECT_EQ(s.get(1).num_computed, 0);
  EXPECT_EQ(s.get(1).tokens, (std::vector<int32_t>{4, 3, 2, 1, 2}));  // keeps its sampled token
  s.on_step_done(out);
  s.remove(0);  // finished: its pages come back at once
  EXPECT_EQ(kv.pool().num_used(), 0);
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].id, 1);
  // Its full first page was cached when it ran before, so only the sampled token is recomputed.
  EXPECT_EQ(out.chunks[0].start, 4);
  EXPECT_EQ(out.chunks[0].count, 1);
  EXPECT_TRUE(out.chunks[0].samples);
}

TEST(Scheduler, RemovingAWaitingRequestFreesNothingAndForgetsIt) {
  kvcache::KvCacheManager kv(2, kvcache::PrefixHashKey{1, 2}, 4);
  Scheduler s({.max_num_seqs = 1, .max_num_batched_tokens = 64}, kv);
  s.add(0, {1, 2});
  s.add(1, {3, 4});
  const SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);  // max_num_seqs = 1
  EXPECT_EQ(s.num_waiting(), 1);
  s.remove(1);
  EXPECT_FALSE(s.contains(1));
  EXPECT_EQ(s.num_waiting(), 0);
  s.remove(0);
  EXPECT_EQ(kv.pool().num_used(), 0);
  EXPECT_FALSE(s.has_work());
}

}  // namespace
}  // namespace fp4::scheduler
