#include "kvcache/page_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/nvfp4.h"
#include "kvcache/sizing.h"
#include "tests/support/expect_error.h"
#include "tests/unit/kvcache/page_geometries.h"

namespace fp4::kvcache {
namespace {

using page_cases::Geometry;
using page_cases::kAllDTypes;
using page_cases::kGeometries;
using page_cases::layout_for;


std::string label(PageDType dtype, const Geometry& g) {
  return std::string(page_dtype_name(dtype)) + " " + g.name;
}

TEST(PageLayout, M3Nvfp4PagesMatchTheDesign) {
  // [K codes 4 x 128 x 64][K scales 4 x 128 x 8][V codes][V scales] = 73,728 B; index 72 B/token.
  const PageLayout kv = kv_page_layout(PageDType::kNVFP4, 4, 128);
  EXPECT_EQ(kv.k_codes.offset, 0);
  EXPECT_EQ(kv.k_codes.bytes, 32'768);
  EXPECT_EQ(kv.k_scales.offset, 32'768);
  EXPECT_EQ(kv.k_scales.bytes, 4'096);
  EXPECT_EQ(kv.v_codes.offset, 36'864);
  EXPECT_EQ(kv.v_scales.offset, 69'632);
  EXPECT_EQ(kv.page_bytes, 73'728);
  EXPECT_EQ(kv.groups, 4);
  // Head 2, token 5: past two heads' 128 rows, then five rows of 64 B codes / 8 B scales.
  EXPECT_EQ(kv.code_offset(kv.v_codes, 5, 2), 36'864 + (2 * 128 + 5) * 64);
  EXPECT_EQ(kv.scale_offset(kv.v_scales, 5, 2), 69'632 + (2 * 128 + 5) * 8);
  const PageLayout idx = index_page_layout(PageDType::kNVFP4, 128);
  EXPECT_EQ(idx.page_bytes, 9'216);
  EXPECT_EQ(idx.page_bytes / kPageTokens, 72);
  EXPECT_EQ(idx.v_codes.bytes + idx.v_scales.bytes, 0);
}

TEST(PageLayout, M3PagesInTheOtherFormats) {
  EXPECT_EQ(kv_page_layout(PageDType::kFP32, 4, 128).page_bytes, 2 * 4 * 128 * 128 * 4);
  EXPECT_EQ(kv_page_layout(PageDType::kBF16, 4, 128).page_bytes, 262'144);
  EXPECT_EQ(kv_page_layout(PageDType::kFP8, 4, 128).page_bytes, 131'072);
  EXPECT_EQ(index_page_layout(PageDType::kBF16, 128).page_bytes, 32'768);
  EXPECT_EQ(index_page_layout(PageDType::kFP8, 128).page_bytes, 16'384);
  for (PageDType dtype : {PageDType::kFP32, PageDType::kBF16, PageDType::kFP8}) {
    EXPECT_EQ(kv_page_layout(dtype, 4, 128).k_scales.bytes, 0) << page_dtype_name(dtype);
  }
}

TEST(PageLayout, TinyHeadDimFlattensTheVector) {
  // 4 heads x 8 dims = 32 values a token: two blocks that each span two heads.
  const PageLayout l = kv_page_layout(PageDType::kNVFP4, 4, 8);
  EXPECT_EQ(l.groups, 1);
  EXPECT_EQ(l.group_elems, 32);
  EXPECT_EQ(l.code_row_bytes, 16);
  EXPECT_EQ(l.scale_row_bytes, 2);
  EXPECT_EQ(l.k_scales.offset, 128 * 16);
  EXPECT_EQ(l.page_bytes, 2 * 128 * 18);
  EXPECT_EQ(l.code_offset(l.k_codes, 3, 1), 3 * 16 + 4);  // head 1 starts at value 8
  EXPECT_EQ(l.scale_offset(l.k_scales, 3, 3), 128 * 16 + 3 * 2 + 1);
  // BF16 of the same model uses the same token-major grouping.
  const PageLayout bf16 = kv_page_layout(PageDType::kBF16, 4, 8);
  EXPECT_EQ(bf16.code_offset(bf16.k_codes, 3, 1), (3 * 32 + 8) * 2);
}

TEST(PageLayout, RefusesGeometriesItCannotStore) {
  testing::expect_error([] { kv_page_layout(PageDType::kNVFP4, 1, 8); },
                        {"head_dim 8", "flattened", "8 values", "multiple of 16"});
  testing::expect_error([] { index_page_layout(PageDType::kNVFP4, 40); }, {"index-K", "40"});
  testing::expect_error([] { kv_page_layout(PageDType::kBF16, 0, 128); }, {"heads", "0"});
  testing::expect_error([] { page_dtype(CacheDType::kNone); }, {"none"});
  // FP32 and BF16 store any vector.
  EXPECT_EQ(kv_page_layout(PageDType::kBF16, 1, 8).page_bytes, 2 * 128 * 8 * 2);
}

TEST(PageLayout, PageBytesAgreeWithSizing) {
  // The pool is sized from kv_layout's bytes per token; a page must be exactly 128 of them.
  for (const KvGeometry& base : {KvGeometry{4, 128, 0, 1, 128}, KvGeometry{4, 8, 0, 1, 32}}) {
    for (CacheDType cd : {CacheDType::kBF16, CacheDType::kFP8, CacheDType::kNVFP4}) {
      for (int tp : {1, 2, 4, 8}) {
        const int heads = base.num_kv_heads >= tp ? base.num_kv_heads / tp : 1;
        if (cd == CacheDType::kNVFP4 && heads * base.head_dim % kNvfp4BlockElems != 0) {
          EXPECT_THROW(kv_layout(base, {cd, cd}, tp), Error);  // both refuse it
          EXPECT_THROW(kv_page_layout(PageDType::kNVFP4, heads, base.head_dim), Error);
          continue;
        }
        const KvLayout sized = kv_layout(base, {cd, cd}, tp);
        ASSERT_EQ(sized.kv_heads_per_gpu, heads);
        const PageLayout kv = kv_page_layout(page_dtype(cd), heads, base.head_dim);
        const PageLayout idx = index_page_layout(page_dtype(cd), base.index_head_dim);
        const std::string what = std::string(cache_dtype_name(cd)) + " tp" + std::to_string(tp) +
                                 " head_dim " + std::to_string(base.head_dim);
        EXPECT_EQ(kv.page_bytes, sized.sparse.kv * kPageTokens) << what;
        EXPECT_EQ(idx.page_bytes, sized.sparse.index * kPageTokens) << what;
        EXPECT_EQ(kv.page_bytes / kPageTokens, 2 * cache_vector_bytes(cd, kv.vector_elems()));
      }
    }
    // FP32 has no CacheDType: it is twice BF16, value for value.
    EXPECT_EQ(kv_page_layout(PageDType::kFP32, 4, base.head_dim).page_bytes,
              2 * kv_page_layout(PageDType::kBF16, 4, base.head_dim).page_bytes);
  }
}

TEST(PageLayout, TokenHeadOffsetsTileEachRegionExactly) {
  // Every (token, head) owns a disjoint run of codes, and the runs cover the region.
  for (PageDType dtype : kAllDTypes) {
    for (const Geometry& g : kGeometries) {
      if (dtype == PageDType::kNVFP4 && g.heads * g.head_dim % 16 != 0) continue;
      const PageLayout l = layout_for(dtype, g);
      EXPECT_EQ(l.k_scales.offset, l.k_codes.offset + l.k_codes.bytes);
      EXPECT_EQ(l.v_codes.offset, l.k_scales.offset + l.k_scales.bytes);
      EXPECT_EQ(l.page_bytes, l.v_scales.offset + l.v_scales.bytes);
      std::vector<int> owners(l.page_bytes, 0);
      const int64_t run = page_code_bytes(dtype, g.head_dim);
      for (const PageRegion* r : {&l.k_codes, &l.v_codes}) {
        if (r->bytes == 0) continue;  // the index pool has no V
        for (int t = 0; t < l.page_tokens; ++t) {
          for (int h = 0; h < g.heads; ++h) {
            const int64_t at = l.code_offset(*r, t, h);
            ASSERT_GE(at, r->offset);
            ASSERT_LE(at + run, r->offset + r->bytes);
            for (int64_t i = 0; i < run; ++i) ++owners[at + i];
          }
        }
      }
      for (int64_t i = 0; i < l.page_bytes; ++i) {
        const bool in_codes = i < l.k_scales.offset ||
                              (i >= l.v_codes.offset && i < l.v_scales.offset);
        ASSERT_EQ(owners[i], in_codes ? 1 : 0) << label(dtype, g) << " byte " << i;
      }
    }
  }
}

}  // namespace
}  // namespace fp4::kvcache
