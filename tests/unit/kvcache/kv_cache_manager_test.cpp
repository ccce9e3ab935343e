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
  // 3 pages fit exactly: the 2 cached ones taken back and 1 allocated (the order of the two is
  // tested in HitPagesAreTakenBackBeforeAllocating).
  b.resize(3 * kPageTokens);
  EXPECT_TRUE(m.can_add_sequence(b));
  EXPECT_EQ(m.add_sequence(2, b), std::optional<int64_t>(2 * kPageTokens));
  EXPECT_EQ(m.pool().num_free(), 0);
}

// With no free page left, the pages a new sequence needs must come from evicting cached pages
// nobody holds; its own prefix hits are among those and must be taken back first, or the
// allocation would evict (and hand out again) a page the sequence is about to share.
TEST(KvCacheManager, HitPagesAreTakenBackBeforeAllocating) {
  constexpr int P = 4;
  KvCacheManager m(5, kKey, P);
  const std::vector<int32_t> a = iota_tokens(2 * P + 1);  // pages: 2 full + 1 partial
  prefill(m, 1, a);
  const std::vector<PageId> a_pages = m.block_table(1).pages;
  prefill(m, 2, iota_tokens(P + 1, 100));  // 1 full + 1 partial, unrelated tokens
  m.free(1);  // a's full pages become evictable, its partial page free
  m.free(2);
  prefill(m, 3, iota_tokens(2 * P, 200));  // takes both free pages
  ASSERT_EQ(m.pool().num_free(), 3);       // all evictable now: a's two pages and one of 2's
  ASSERT_EQ(m.pool().evictable_pages().front(), a_pages[1]) << "a's tail is the oldest";

  std::vector<int32_t> b(a.begin(), a.begin() + 2 * P);
  b.push_back(-1);
  ASSERT_EQ(m.add_sequence(4, b), std::optional<int64_t>(2 * P));
  const std::vector<PageId>& b_pages = m.block_table(4).pages;
  ASSERT_EQ(b_pages.size(), 3u);
  EXPECT_EQ(b_pages[0], a_pages[0]);
  EXPECT_EQ(b_pages[1], a_pages[1]);
  EXPECT_EQ(m.pool().refcount(a_pages[0]), 1);
  EXPECT_EQ(m.pool().refcount(a_pages[1]), 1);
  EXPECT_NE(b_pages[2], a_pages[0]);
  EXPECT_NE(b_pages[2], a_pages[1]);
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
