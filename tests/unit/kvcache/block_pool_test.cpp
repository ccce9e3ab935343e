#include "kvcache/block_pool.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/check.h"
#include "kvcache/prefix_hash.h"
#include "tests/support/expect_error.h"

namespace fp4::kvcache {
namespace {

// SipHash-2-4 reference vectors (the paper's reference test.c): key bytes 00..0f, message
// bytes 00..n-1.
TEST(SipHash, MatchesTheReferenceVectors) {
  const PrefixHashKey key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  std::vector<std::byte> msg(16);
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<std::byte>(i);
  const auto h = [&](size_t n) { return siphash24(key, std::span(msg).first(n)); };
  EXPECT_EQ(h(0), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ(h(1), 0x74f839c593dc67fdull);
  EXPECT_EQ(h(8), 0x93f5f5799a932462ull);
  EXPECT_EQ(h(15), 0xa129ca6149be45e5ull);
  EXPECT_EQ(h(16), 0x3f2acc7f57c29bdbull);
}

TEST(HashPage, IsSipHashOfTheParentAndTokensInLittleEndian) {
  const PrefixHashKey key{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  // Parent 0x0706050403020100 and tokens 0x0b0a0908, 0x0f0e0d0c serialize to bytes 00..0f.
  const int32_t tokens[] = {0x0b0a0908, 0x0f0e0d0c};
  EXPECT_EQ(hash_page(key, 0x0706050403020100ull, tokens), 0x3f2acc7f57c29bdbull);
}

TEST(HashPage, ChainsOnTheParentAndDependsOnTheKey) {
  const PrefixHashKey key{1, 2};
  std::vector<int32_t> page(kPageTokens);
  std::iota(page.begin(), page.end(), 0);
  const PageHash first = hash_page(key, kRootPageHash, page);
  EXPECT_EQ(first, hash_page(key, kRootPageHash, page));
  // The same tokens after a different prefix are a different page of K/V.
  EXPECT_NE(hash_page(key, first, page), first);
  EXPECT_NE(hash_page(PrefixHashKey{1, 3}, kRootPageHash, page), first);
  page.back() = -1;
  EXPECT_NE(hash_page(key, kRootPageHash, page), first);
}

TEST(BlockPool, AllocatesEveryPageOnceThenFailsCleanly) {
  BlockPool pool(4, 2);
  EXPECT_EQ(pool.num_free(), 4);
  std::vector<PageId> got;
  for (int i = 0; i < 4; ++i) {
    const auto p = pool.allocate();
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(pool.refcount(*p), 1);
    got.push_back(*p);
  }
  EXPECT_EQ(got, (std::vector<PageId>{0, 1, 2, 3}));
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.num_used(), 4);
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
  pool.release(2);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.75);
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(2));
}

TEST(BlockPool, SharedPageReturnsWhenTheLastReferenceGoes) {
  BlockPool pool(2, 2);
  const PageId p = *pool.allocate();
  pool.add_ref(p);
  pool.add_ref(p);
  EXPECT_EQ(pool.refcount(p), 3);
  pool.release(p);
  pool.release(p);
  EXPECT_EQ(pool.num_free(), 1);
  pool.release(p);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.refcount(p), 0);
}

TEST(BlockPool, MisuseIsAnError) {
  BlockPool pool(2, 2);
  testing::expect_error([&] { pool.release(0); }, {"release", "page 0", "not in use"});
  testing::expect_error([&] { pool.add_ref(1); }, {"add_ref", "page 1", "free"});
  testing::expect_error([&] { pool.release(2); }, {"page id 2", "out of range"});
  testing::expect_error([&] { pool.refcount(-1); }, {"page id -1", "out of range"});
  const PageId p = *pool.allocate();
  const int32_t half[] = {1};
  testing::expect_error([&] { pool.cache(p, 7, kRootPageHash, half); }, {"1 tokens", "full page of 2"});
  const int32_t full[] = {1, 2};
  ASSERT_TRUE(pool.cache(p, 7, kRootPageHash, full));
  testing::expect_error([&] { pool.cache(p, 8, kRootPageHash, full); }, {"already cached"});
  testing::expect_error([&] { BlockPool(-1); }, {"num_pages is -1"});
}

TEST(BlockPool, CachedPageOutlivesItsLastReferenceUntilEvicted) {
  BlockPool pool(2, 2);
  const int32_t tokens[] = {5, 6};
  const PageId p = *pool.allocate();
  ASSERT_TRUE(pool.cache(p, 42, kRootPageHash, tokens));
  pool.release(p);
  EXPECT_TRUE(pool.is_cached(p));
  EXPECT_EQ(pool.num_free(), 2);  // evictable pages count as free
  EXPECT_EQ(pool.num_evictable(), 1);
  EXPECT_EQ(pool.find_cached(42, kRootPageHash, tokens), std::optional<PageId>(p));
  // Taking it back: in use again, no longer evictable.
  pool.add_ref(p);
  EXPECT_EQ(pool.refcount(p), 1);
  EXPECT_EQ(pool.num_evictable(), 0);
  pool.release(p);
  // The free page goes first; the cached one only when nothing else is left.
  const PageId q = *pool.allocate();
  EXPECT_NE(q, p);
  EXPECT_TRUE(pool.is_cached(p));
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(p));
  EXPECT_FALSE(pool.is_cached(p));
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_FALSE(pool.find_cached(42, kRootPageHash, tokens).has_value());
}

TEST(BlockPool, EvictsTheLeastRecentlyReleasedCachedPage) {
  BlockPool pool(3, 1);
  std::vector<PageId> pages;
  for (int32_t i = 0; i < 3; ++i) {
    pages.push_back(*pool.allocate());
    const int32_t token[] = {i};
    ASSERT_TRUE(pool.cache(pages.back(), 100 + i, kRootPageHash, token));
  }
  pool.release(pages[1]);
  pool.release(pages[0]);
  pool.release(pages[2]);
  // Reusing page 0 refreshes it: it is now the most recently released.
  pool.add_ref(pages[0]);
  pool.release(pages[0]);
  EXPECT_EQ(pool.evictable_pages(), (std::vector<PageId>{pages[1], pages[2], pages[0]}));
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(pages[1]));
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(pages[2]));
  EXPECT_EQ(pool.allocate(), std::optional<PageId>(pages[0]));
  EXPECT_FALSE(pool.allocate().has_value());
}

TEST(BlockPool, FindVerifiesTokensAndParentAndRefusesATakenHash) {
  BlockPool pool(2, 2);
  const int32_t a[] = {1, 2}, b[] = {1, 3};
  const PageId p = *pool.allocate(), q = *pool.allocate();
  ASSERT_TRUE(pool.cache(p, 9, /*parent=*/5, a));
  // A colliding hash with other tokens or another parent is a miss, never the wrong page.
  EXPECT_FALSE(pool.find_cached(9, 5, b).has_value());
  EXPECT_FALSE(pool.find_cached(9, 6, a).has_value());
  EXPECT_EQ(pool.find_cached(9, 5, a), std::optional<PageId>(p));
  // The first page registered under a hash keeps it; the other stays private.
  EXPECT_FALSE(pool.cache(q, 9, 5, b));
  EXPECT_FALSE(pool.is_cached(q));
  pool.release(q);
  EXPECT_EQ(pool.free_list().size(), 1u);
}

}  // namespace
}  // namespace fp4::kvcache
