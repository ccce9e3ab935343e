#include "kvcache/sizing.h"

#include <gtest/gtest.h>

#include "core/check.h"
#include "tests/support/expect_error.h"

namespace fp4::kvcache {
namespace {

// The MiniMax-M3 attention geometry (its published config.json): 4 KV heads of 128 dims, 60 layers of
// which 3 are dense and 57 sparse, one 128-wide index-K head on sparse layers.
KvGeometry m3_geometry() {
  KvGeometry g;
  g.num_kv_heads = 4;
  g.head_dim = 128;
  g.num_dense_layers = 3;
  g.num_sparse_layers = 57;
  g.index_head_dim = 128;
  return g;
}

TEST(CacheVectorBytes, MatchesTheFormats) {
  // One 128-value row: BF16 2 B/value, FP8 1 B/value, NVFP4 64 B of codes + 8 E4M3 scales.
  EXPECT_EQ(cache_vector_bytes(CacheDType::kBF16, 128), 256);
  EXPECT_EQ(cache_vector_bytes(CacheDType::kFP8, 128), 128);
  EXPECT_EQ(cache_vector_bytes(CacheDType::kNVFP4, 128), 72);
  EXPECT_EQ(cache_vector_bytes(CacheDType::kNone, 128), 0);
  EXPECT_THROW(cache_vector_bytes(CacheDType::kNVFP4, 40), Error);
}

TEST(KvLayout, Nvfp4PageMatchesTheDesignedPage) {
  // docs/planner.md §1: the NVFP4 page of one M3 layer (128 tokens, 4 heads of 128) is
  // 73,728 B, of which K codes take 32,768 B and K scales 4,096 B, and V the same again.
  KvGeometry g = m3_geometry();
  g.num_dense_layers = 1;
  g.num_sparse_layers = 0;
  const KvLayout l = kv_layout(g, {CacheDType::kNVFP4, CacheDType::kNone});
  EXPECT_EQ(l.bytes_per_page(), 73'728);
  EXPECT_EQ(l.bytes_per_page(), 2 * (32'768 + 4'096));
  EXPECT_EQ(l.dense.kv, 576);
  // The NVFP4 index-K page of one sparse layer: [128 tokens x 64 B codes][128 x 8 B scales].
  g.num_dense_layers = 0;
  g.num_sparse_layers = 1;
  const KvLayout idx = kv_layout(g, {CacheDType::kNVFP4, CacheDType::kNVFP4});
  EXPECT_EQ(idx.index_bytes_per_token() * kPageTokens, 128 * 64 + 128 * 8);
}

TEST(KvLayout, M3MainCacheBytesPerTokenInEveryFormat) {
  // Main K/V counts all 60 layers; launch report: FP8 61,440 and NVFP4 34,560 B/token.
  const KvGeometry g = m3_geometry();
  EXPECT_EQ(kv_layout(g, {CacheDType::kBF16, CacheDType::kNone}).kv_bytes_per_token(), 122'880);
  EXPECT_EQ(kv_layout(g, {CacheDType::kFP8, CacheDType::kNone}).kv_bytes_per_token(), 61'440);
  EXPECT_EQ(kv_layout(g, {CacheDType::kNVFP4, CacheDType::kNone}).kv_bytes_per_token(), 34'560);
}

TEST(KvLayout, IndexCacheIsOnSparseLayersOnly) {
  const KvGeometry g = m3_geometry();
  EXPECT_EQ(kv_layout(g, {CacheDType::kFP8, CacheDType::kBF16}).index_bytes_per_token(), 14'592);
  EXPECT_EQ(kv_layout(g, {CacheDType::kFP8, CacheDType::kFP8}).index_bytes_per_token(), 7'296);
  EXPECT_EQ(kv_layout(g, {CacheDType::kFP8, CacheDType::kNVFP4}).index_bytes_per_token(), 4'104);
  const KvLayout l = kv_layout(g, {CacheDType::kFP8, CacheDType::kBF16});
  EXPECT_EQ(l.dense.index, 0);
  EXPECT_EQ(l.bytes_per_token(), 61'440 + 14'592);
}

TEST(KvLayout, TensorParallelSplitsHeadsButNotTheIndexCache) {
  // At TP4 with FP8 main KV a rank holds 60 x 256 = 15,360 B/token of main KV
  // plus the whole 14,592 B/token bf16 index cache, because index K has a single head.
  const KvGeometry g = m3_geometry();
  const KvLayout tp4 = kv_layout(g, {CacheDType::kFP8, CacheDType::kBF16}, 4);
  EXPECT_EQ(tp4.kv_heads_per_gpu, 1);
  EXPECT_EQ(tp4.kv_bytes_per_token(), 15'360);
  EXPECT_EQ(tp4.index_bytes_per_token(), 14'592);
  // At TP8 each of the 4 KV heads is replicated on 2 GPUs: still one head per GPU.
  const KvLayout tp8 = kv_layout(g, {CacheDType::kFP8, CacheDType::kBF16}, 8);
  EXPECT_EQ(tp8.kv_heads_per_gpu, 1);
  EXPECT_EQ(tp8.kv_bytes_per_token(), 15'360);
  EXPECT_THROW(kv_layout(g, {CacheDType::kFP8, CacheDType::kBF16}, 3), Error);
}

TEST(KvLayout, Nvfp4BlocksRunAlongTheFlattenedHeads) {
  // A head_dim of 8 is fine while the per-GPU vector (4 heads x 8) holds whole 16-value blocks.
  KvGeometry g;
  g.num_kv_heads = 4;
  g.head_dim = 8;
  g.num_dense_layers = 5;
  const KvLayout l = kv_layout(g, {CacheDType::kNVFP4, CacheDType::kNone});
  EXPECT_EQ(l.dense.kv, 2 * (16 + 2));
  EXPECT_THROW(kv_layout(g, {CacheDType::kNVFP4, CacheDType::kNone}, 4), Error);
}

TEST(KvLayout, RejectsMalformedGeometry) {
  KvGeometry g = m3_geometry();
  EXPECT_THROW(kv_layout(g, {CacheDType::kNone, CacheDType::kBF16}), Error);
  g.index_head_dim = 0;
  EXPECT_THROW(kv_layout(g, {CacheDType::kFP8, CacheDType::kBF16}), Error);
  g = m3_geometry();
  g.num_dense_layers = g.num_sparse_layers = 0;
  EXPECT_THROW(kv_layout(g, {CacheDType::kFP8, CacheDType::kBF16}), Error);
}

TEST(Pages, PartialPagesCountWhole) {
  EXPECT_EQ(pages_for_tokens(0), 0);
  EXPECT_EQ(pages_for_tokens(1), 1);
  EXPECT_EQ(pages_for_tokens(128), 1);
  EXPECT_EQ(pages_for_tokens(129), 2);
  EXPECT_EQ(pages_for_tokens(262'144), 2'048);
  EXPECT_EQ(pages_for_tokens(262'145), 2'049);
}

TEST(KvBudget, RoundsTheUsableMemoryUpLikeVllm) {
  EXPECT_EQ(kv_budget_bytes(1000, 0.9, 0), 900);
  EXPECT_EQ(kv_budget_bytes(1001, 0.9, 0), 901);  // ceil(900.9)
  EXPECT_EQ(kv_budget_bytes(1000, 0.9, 950), -50);
  EXPECT_THROW(kv_budget_bytes(1000, 1.5, 0), Error);
  EXPECT_THROW(kv_budget_bytes(1000, 0.0, 0), Error);
}

TEST(KvPool, CountsWholePagesPerSequence) {
  KvGeometry g;
  g.num_kv_heads = 1;
  g.head_dim = 16;
  g.num_dense_layers = 1;
  const KvLayout l = kv_layout(g, {CacheDType::kFP8, CacheDType::kNone});
  ASSERT_EQ(l.bytes_per_page(), 128 * 2 * 16);
  const int64_t page = l.bytes_per_page();

  // 5 pages; a 200-token sequence needs 2 pages, so 2 fit, although 5 x 128 / 200 = 3.2.
  KvPool p = size_kv_pool(l, 5 * page + page - 1, 200);
  EXPECT_EQ(p.num_pages, 5);
  EXPECT_EQ(p.tokens, 640);
  EXPECT_EQ(p.pages_per_seq, 2);
  EXPECT_EQ(p.max_seqs, 2);
  EXPECT_DOUBLE_EQ(p.concurrency, 2.5);

  p = size_kv_pool(l, page - 1, 128);
  EXPECT_EQ(p.num_pages, 0);
  EXPECT_EQ(p.max_seqs, 0);
  p = size_kv_pool(l, -page, 128);  // weights and reserve already exceed the budget
  EXPECT_EQ(p.num_pages, 0);
  EXPECT_THROW(size_kv_pool(l, page, 0), Error);
}

TEST(CacheDTypeNames, ParseAndNameRoundTrip) {
  for (CacheDType d : {CacheDType::kBF16, CacheDType::kFP8, CacheDType::kNVFP4}) {
    EXPECT_EQ(parse_cache_dtype(cache_dtype_name(d), "--x", false), d);
  }
  EXPECT_EQ(parse_cache_dtype("none", "--x", true), CacheDType::kNone);
  // 'none' leaves a cache out of the budget, which only the index cache may be.
  testing::expect_error([] { parse_cache_dtype("none", "--kv-cache-dtype", false); },
                        {"--kv-cache-dtype 'none'"});
  EXPECT_THROW(parse_cache_dtype("fp4", "--x", true), Error);
}

}  // namespace
}  // namespace fp4::kvcache
