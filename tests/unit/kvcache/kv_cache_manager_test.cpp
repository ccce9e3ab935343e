#include "kvcache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/check.h"
#include "tests/support/expect_error.h"

namespace fp4::kvcache {
namespace {

const PrefixHashKey kKey{0x1234, 0x5678};

std::vector<int32_t> iota_tokens(int n, int32_t first = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A sequence whose whole prompt has been prefilled.
int64_t prefill(KvCacheManager& m, SeqId seq, const std::vector<int32_t>& prompt) {
  const std::optional<int64_t> hit = m.add_sequence(seq, prompt);
  EXPECT_TRUE(hit.has_value());
  m.append(seq, std::span(prompt).subspan(*hit));
  return *hit;
}

TEST(KvCacheManager, SharesFullPagesOfACommonPrefix) {
  KvCacheManager m(16, kKey);
  const std::vector<int32_t> a = iota_tokens(3 * kPageTokens + 5);
  EXPECT_EQ(prefill(m, 1, a), 0);
  EXPECT_EQ(m.block_table(1).pages.size(), 4u);
  EXPECT_EQ(m.pool().num_cached(), 3);  // the partial last page stays private

  // Same first two pages, then a different third page.
  std::vector<int32_t> b = a;
  b[2 * kPageTokens + 7] = -5;
  EXPECT_EQ(m.cached_prefix_tokens(b), 2 * kPageTokens);
  EXPECT_EQ(prefill(m, 2, b), 2 * kPageTokens);
  const auto& ta = m.block_table(1).pages;
  const auto& tb = m.block_table(2).pages;
  EXPECT_EQ(tb[0], ta[0]);
  EXPECT_EQ(tb[1], ta[1]);
  EXPECT_NE(tb[2], ta[2]);
  EXPECT_EQ(m.pool().refcount(ta[0]), 2);
  EXPECT_EQ(m.pool().refcount(ta[2]), 1);
  EXPECT_EQ(m.stats().requests, 2);
  EXPECT_EQ(m.stats().queries, std::ssize(a) + std::ssize(b));
  EXPECT_EQ(m.stats().hits, 2 * kPageTokens);
}

TEST(KvCacheManager, EqualPagesAfterDifferentPrefixesDoNotMatch) {
  KvCacheManager m(8, kKey);
  const std::vector<int32_t> page = iota_tokens(kPageTokens);
  std::vector<int32_t> a = iota_tokens(kPageTokens, 1000);
  a.insert(a.end(), page.begin(), page.end());
  prefill(m, 1, a);
  // `page` is cached, but only as the second page after a's first: alone it is a miss.
  std::vector<int32_t> query = page;
  query.push_back(0);
  EXPECT_EQ(m.cached_prefix_tokens(query), 0);
}

TEST(KvCacheManager, NeverTakesTheLastPromptTokenFromTheCache) {
  KvCacheManager m(8, kKey);
  const std::vector<int32_t> a = iota_tokens(2 * kPageTokens);
  prefill(m, 1, a);
  EXPECT_EQ(m.cached_prefix_tokens(a), 2 * kPageTokens);
  // The model must run on at least the last token, so its page is recomputed privately.
  EXPECT_EQ(prefill(m, 2, a), kPageTokens);
  EXPECT_NE(m.block_table(2).pages[1], m.block_table(1).pages[1]);
  EXPECT_EQ(m.pool().refcount(m.block_table(1).pages[1]), 1);
}

TEST(KvCacheManager, ReusesTheCacheAfterTheOwnerIsFreed) {
  KvCacheManager m(4, kKey);
  const std::vector<int32_t> a = iota_tokens(2 * kPageTokens + 1);
  prefill(m, 1, a);
  const std::vector<PageId> pages = m.block_table(1).pages;
  m.free(1);
  EXPECT_EQ(m.pool().num_free(), 4);
  EXPECT_EQ(m.pool().num_evictable(), 2);
  EXPECT_EQ(prefill(m, 2, a), 2 * kPageTokens);
  EXPECT_EQ(m.block_table(2).pages[0], pages[0]);
  EXPECT_EQ(m.block_table(2).pages[1], pages[1]);
}

TEST(KvCacheManager, AddSequenceIsAllOrNothing) {
  KvCacheManager m(3, kKey);
  const std::vector<int32_t> a = iota_tokens(2 * kPageTokens + 1);  // 3 pages
  prefill(m, 1, a);
  m.free(1);
  // 2 cached pages are evictable; a 4-page prompt sharing them needs 2 new pages + 2 taken back.
  std::vector<int32_t> b = iota_tokens(4 * kPageTokens);
  EXPECT_FALSE(m.can_add_sequence(b));
  EXPECT_EQ(m.add_sequence(2, b), std::nullopt);
  EXPECT_FALSE(m.contains(2));
  EXPECT_EQ(m.pool().num_evictable(), 2);
  EXPECT_EQ(m.pool().num_free(), 3);
  EXPECT_EQ(m.stats().requests, 1);
  // 3 pages fit exactly: the 2 cached ones are taken back before the new one is allocated,
  // so the allocation cannot evict them.
  b.resize(3 * kPageTokens);
  EXPECT_TRUE(m.can_add_sequence(b));
  EXPECT_EQ(m.add_sequence(2, b), std::optional<int64_t>(2 * kPageTokens));
  EXPECT_EQ(m.pool().num_free(), 0);
}

TEST(KvCacheManager, AllocateGrowsOrChangesNothing) {
  KvCacheManager m(3, kKey, /*page_tokens=*/4);
  prefill(m, 1, {1, 2, 3});
  EXPECT_TRUE(m.can_allocate(1, 1));  // room left in the first page
  EXPECT_TRUE(m.allocate(1, 1));
  EXPECT_EQ(m.block_table(1).pages.size(), 1u);
  EXPECT_TRUE(m.allocate(1, 9));  // 3 + 9 = 12 tokens: 3 pages
  EXPECT_EQ(m.block_table(1).pages.size(), 3u);
  EXPECT_FALSE(m.can_allocate(1, 10));
  EXPECT_FALSE(m.allocate(1, 10));
  EXPECT_EQ(m.block_table(1).pages.size(), 3u);
  m.append(1, std::vector<int32_t>{4, 5, 6, 7, 8, 9, 10, 11, 12});
  EXPECT_EQ(m.num_tokens(1), 12);
  EXPECT_EQ(m.pool().num_cached(), 3);
  testing::expect_error([&] { m.append(1, std::vector<int32_t>{13}); },
                        {"sequence 1", "room for 12", "append 1"});
  m.free(1);
  EXPECT_EQ(m.pool().num_free(), 3);
}

TEST(KvCacheManager, MisuseIsAnError) {
  KvCacheManager m(2, kKey, 4);
  testing::expect_error([&] { m.add_sequence(1, {}); }, {"sequence 1", "empty prompt"});
  prefill(m, 1, {1});
  testing::expect_error([&] { m.add_sequence(1, std::vector<int32_t>{2}); },
                        {"sequence 1", "already exists"});
  testing::expect_error([&] { m.free(9); }, {"no sequence 9"});
  testing::expect_error([&] { m.allocate(9, 1); }, {"no sequence 9"});
  testing::expect_error([&] { m.can_allocate(1, -1); }, {"n is -1"});
}

}  // namespace
}  // namespace fp4::kvcache
