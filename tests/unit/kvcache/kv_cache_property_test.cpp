// Random workloads against KvCacheManager, checking the pool's invariants after every step and
// every prefix hit against a slow reference that remembers the tokens behind each page.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "kvcache/kv_cache_manager.h"
#include "tests/support/random.h"

namespace fp4::kvcache {
namespace {

struct PoolSnapshot {
  std::vector<int32_t> refcounts;
  std::vector<PageId> free_list, evictable;
  int32_t num_cached;
  bool operator==(const PoolSnapshot&) const = default;
};

PoolSnapshot snapshot(const BlockPool& pool) {
  PoolSnapshot s;
  for (PageId p = 0; p < pool.num_pages(); ++p) s.refcounts.push_back(pool.refcount(p));
  s.free_list.assign(pool.free_list().begin(), pool.free_list().end());
  s.evictable = pool.evictable_pages();
  s.num_cached = pool.num_cached();
  return s;
}

class Workload {
 public:
  Workload(int32_t num_pages, int page_tokens, uint64_t salt)
      : m_(num_pages, PrefixHashKey{salt, ~salt}, page_tokens), P_(page_tokens),
        rng_(testing::seeded_rng(salt)) {
    // A few long "documents" that prompts start from, so prompts share prefixes of every
    // length; a vocabulary of 3 tokens makes equal pages at different positions common.
    for (int d = 0; d < 5; ++d) docs_.push_back(random_tokens(12 * P_));
  }

  void run(int steps) {
    for (int step = 0; step < steps; ++step) {
      const int op = std::uniform_int_distribution<int>(0, 9)(rng_);
      if (op < 4 || live_.empty()) add();
      else if (op < 8) grow();
      else free_one();
      check_invariants();
    }
    for (SeqId seq : std::vector<SeqId>(live_.begin(), live_.end())) {
      m_.free(seq);
      live_.erase(seq);
      check_invariants();
    }
    EXPECT_EQ(m_.pool().num_free(), m_.pool().num_pages()) << "pages leaked";
    EXPECT_EQ(m_.pool().num_used(), 0);
    EXPECT_EQ(m_.stats().requests, adds_);
    EXPECT_EQ(m_.stats().hits, expected_hits_);
    // The workload must have reached the interesting states.
    EXPECT_GT(adds_refused_, 0) << "never ran out of pages";
    EXPECT_GT(grows_refused_, 0) << "never ran out of pages while growing";
    EXPECT_GT(expected_hits_, 0) << "no prefix was ever shared";
  }

 private:
  std::vector<int32_t> random_tokens(int n) {
    std::vector<int32_t> t(n);
    std::uniform_int_distribution<int32_t> vocab(0, 2);
    for (int32_t& x : t) x = vocab(rng_);
    return t;
  }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  // The reference: the longest k such that, for every i < k, some cached page is known to hold
  // exactly the query's first (i+1) pages.
  int64_t pages_for(int64_t tokens) const { return (tokens + P_ - 1) / P_; }

  int64_t reference_hit_pages(std::span<const int32_t> q) {
    int64_t k = 0;
    while ((k + 1) * P_ <= std::ssize(q)) {
      const std::vector<int32_t> prefix(q.begin(), q.begin() + (k + 1) * P_);
      bool found = false;
      for (const auto& [page, content] : content_) found |= m_.pool().is_cached(page) && content == prefix;
      if (!found) break;
      ++k;
    }
    return k;
  }

  void check_match(std::span<const int32_t> q) {
    const std::vector<PageId> pages = m_.match_prefix(q);
    ASSERT_EQ(std::ssize(pages), reference_hit_pages(q));
    for (size_t i = 0; i < pages.size(); ++i) {
      ASSERT_TRUE(m_.pool().is_cached(pages[i]));
      ASSERT_TRUE(content_.contains(pages[i]));
      ASSERT_TRUE(std::ranges::equal(content_[pages[i]], q.first((i + 1) * P_)))
          << "page " << pages[i] << " holds another prefix";
    }
  }

  void add() {
    const auto& doc = docs_[uniform(0, int(docs_.size()) - 1)];
    std::vector<int32_t> prompt(doc.begin(), doc.begin() + uniform(1, int(doc.size())));
    if (uniform(0, 2) == 0) {  // diverge from the document
      const auto tail = random_tokens(uniform(1, 3 * P_));
      prompt.insert(prompt.end(), tail.begin(), tail.end());
    }
    check_match(prompt);
    const int64_t reference_hits =
        std::min(reference_hit_pages(prompt), (std::ssize(prompt) - 1) / P_) * P_;
    const SeqId seq = next_id_++;
    // Whether it fits, worked out here rather than asked of the manager: the pages beyond the
    // hit, plus the hit pages that nobody holds (taking them back uses up a reusable page),
    // must not exceed the free and evictable pages.
    const PoolSnapshot before = snapshot(m_.pool());
    const std::vector<PageId> hit_pages = m_.match_prefix(prompt);
    int64_t idle_hits = 0;
    for (int64_t i = 0; i < reference_hits / P_; ++i) idle_hits += before.refcounts[hit_pages[i]] == 0;
    const bool fits = pages_for(std::ssize(prompt)) - reference_hits / P_ + idle_hits <=
                      std::ssize(before.free_list) + std::ssize(before.evictable);
    ASSERT_EQ(m_.can_add_sequence(prompt), fits);
    const std::optional<int64_t> hit = m_.add_sequence(seq, prompt);
    ASSERT_EQ(hit.has_value(), fits);
    if (!hit) {
      ++adds_refused_;
      ASSERT_TRUE(snapshot(m_.pool()) == before) << "a refused add changed the pool";
      ASSERT_FALSE(m_.contains(seq));
      return;
    }
    ASSERT_EQ(*hit, reference_hits);
    ++adds_;
    expected_hits_ += *hit;
    // Prefill, in one or two chunks.
    const int64_t mid = uniform(int(*hit), int(prompt.size()));
    m_.append(seq, std::span(prompt).subspan(*hit, mid - *hit));
    m_.append(seq, std::span(prompt).subspan(mid));
    live_.insert(seq);
    model_[seq] = prompt;
  }

  void grow() {
    const SeqId seq = *std::next(live_.begin(), uniform(0, int(live_.size()) - 1));
    const int n = uniform(1, 2 * P_);
    const PoolSnapshot before = snapshot(m_.pool());
    const size_t pages_before = m_.block_table(seq).pages.size();
    // Worked out independently: the new pages the grown sequence needs must be reusable now.
    const int64_t needed = std::max<int64_t>(0, pages_for(std::ssize(model_[seq]) + n) - static_cast<int64_t>(pages_before));
    const bool fits = needed <= std::ssize(before.free_list) + std::ssize(before.evictable);
    ASSERT_EQ(m_.can_allocate(seq, n), fits);
    ASSERT_EQ(m_.allocate(seq, n), fits);
    if (!fits) {
      ++grows_refused_;
      ASSERT_TRUE(snapshot(m_.pool()) == before) << "a refused allocate changed the pool";
      ASSERT_EQ(m_.block_table(seq).pages.size(), pages_before);
      return;
    }
    const auto tokens = random_tokens(n);
    m_.append(seq, tokens);
    model_[seq].insert(model_[seq].end(), tokens.begin(), tokens.end());
  }

  void free_one() {
    const SeqId seq = *std::next(live_.begin(), uniform(0, int(live_.size()) - 1));
    m_.free(seq);
    live_.erase(seq);
    model_.erase(seq);
  }

  void check_invariants() {
    const BlockPool& pool = m_.pool();
    const int32_t n = pool.num_pages();
    // References held by block tables, per page; and what each page now holds.
    std::vector<int32_t> refs(n, 0);
    int64_t total_refs = 0;
    for (SeqId seq : live_) {
      const auto& pages = m_.block_table(seq).pages;
      const auto& tokens = model_[seq];
      ASSERT_TRUE(std::ranges::equal(m_.tokens(seq), tokens));
      ASSERT_GE(std::ssize(pages) * P_, std::ssize(tokens));
      ASSERT_EQ(std::set<PageId>(pages.begin(), pages.end()).size(), pages.size())
          << "a page appears twice in one block table";
      for (size_t i = 0; i < pages.size(); ++i) {
        ++refs[pages[i]];
        ++total_refs;
        const auto end = static_cast<int64_t>(i + 1) * P_;
        if (std::ssize(tokens) >= end) {
          content_[pages[i]].assign(tokens.begin(), tokens.begin() + end);
        } else {
          content_.erase(pages[i]);  // reallocated, or not yet full
        }
      }
    }
    int64_t refcount_sum = 0;
    for (PageId p = 0; p < n; ++p) {
      ASSERT_EQ(pool.refcount(p), refs[p]) << "page " << p;
      refcount_sum += pool.refcount(p);
    }
    ASSERT_EQ(refcount_sum, total_refs);

    const std::vector<PageId> free_list(pool.free_list().begin(), pool.free_list().end());
    const std::vector<PageId> evictable = pool.evictable_pages();
    const std::set<PageId> free_set(free_list.begin(), free_list.end());
    const std::set<PageId> evictable_set(evictable.begin(), evictable.end());
    ASSERT_EQ(free_set.size(), free_list.size()) << "a page is twice in the free list";
    ASSERT_EQ(evictable_set.size(), evictable.size()) << "a page is twice in the evictable list";
    ASSERT_EQ(pool.num_free(), std::ssize(free_list) + std::ssize(evictable));
    for (PageId p = 0; p < n; ++p) {
      const bool is_free = free_set.contains(p), is_evictable = evictable_set.contains(p);
      if (pool.refcount(p) > 0) {
        ASSERT_FALSE(is_free || is_evictable) << "page " << p << " is in use and free";
      } else if (pool.is_cached(p)) {
        ASSERT_TRUE(is_evictable && !is_free) << "cached page " << p << " is not evictable";
      } else {
        ASSERT_TRUE(is_free && !is_evictable) << "page " << p << " is lost";
      }
    }
    // No two cached pages hold the same prefix.
    std::set<std::vector<int32_t>> cached_contents;
    int32_t cached = 0;
    for (PageId p = 0; p < n; ++p) {
      if (!pool.is_cached(p)) continue;
      ++cached;
      ASSERT_TRUE(content_.contains(p)) << "cached page " << p << " was never full";
      ASSERT_TRUE(cached_contents.insert(content_[p]).second) << "two cached pages hold one prefix";
    }
    ASSERT_EQ(pool.num_cached(), cached);
  }

  KvCacheManager m_;
  int P_;
  std::mt19937_64 rng_;
  std::vector<std::vector<int32_t>> docs_;
  std::set<SeqId> live_;
  std::map<SeqId, std::vector<int32_t>> model_;
  std::map<PageId, std::vector<int32_t>> content_;  // the full prefix a page was last seen holding
  SeqId next_id_ = 0;
  int64_t adds_ = 0, adds_refused_ = 0, grows_refused_ = 0, expected_hits_ = 0;
};

TEST(KvCacheProperty, RandomWorkloadSmallPages) { Workload(48, 4, 1).run(5000); }

TEST(KvCacheProperty, RandomWorkloadFullSizePages) { Workload(40, kPageTokens, 2).run(3000); }

}  // namespace
}  // namespace fp4::kvcache
