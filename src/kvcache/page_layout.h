// Byte layout of one page (128 tokens) of one layer's paged caches: the main K/V pool and the
// key-only index pool of MSA layers. Byte maps with the M3 numbers: docs/formats/kv_pages.md.
//
// A page holds its regions one after another: [K codes][K scales][V codes][V scales]; the index
// pool has K only, and formats without block scales (FP32, BF16, FP8) have empty scale regions.
// Inside a region, data is head-major, [group][token][values of the group], so that one head's
// 128 tokens are contiguous for the attention kernels (the MSA Q8KV4 and FlashInfer NVFP4 pages
// are head-major too). A group is one head when head_dim is a multiple of the 16-value NVFP4
// block; otherwise (tiny models with head_dim 8) it is the whole flattened per-token vector of
// all heads, so that NVFP4 blocks never straddle tokens. The grouping depends on the geometry
// only, never on the format, so every format of a model indexes its pages the same way.
#pragma once

#include <cstdint>
#include <string_view>

#include "formats/nvfp4.h"
#include "kvcache/cache_dtype.h"
#include "kvcache/sizing.h"

namespace fp4::kvcache {

// Page formats. FP32 exists for tests and FP32 models; CacheDType (what flags select) maps onto
// the other three.
enum class PageDType : uint8_t {
  kFP32,
  kBF16,
  kFP8,    // E4M3 codes; one FP32 scale per layer (and per K/V), dequantization direction
  kNVFP4,  // E2M1 codes + linear E4M3 block scales; optional per-layer FP32 global scale
};

std::string_view page_dtype_name(PageDType dtype);

// Throws fp4::Error for CacheDType::kNone, which has no pages.
PageDType page_dtype(CacheDType dtype);

struct PageRegion {
  int64_t offset = 0;  // from the start of the page
  int64_t bytes = 0;
};

struct PageLayout {
  PageDType dtype = PageDType::kFP32;
  bool has_v = true;      // false for the index pool
  int heads = 0;          // K (and V) heads in this page, i.e. on this GPU
  int head_dim = 0;
  int page_tokens = kPageTokens;
  int groups = 0;         // heads, or 1 when the per-token vector is flattened
  int group_elems = 0;    // head_dim, or heads x head_dim when flattened
  int64_t code_row_bytes = 0;   // one (group, token) row of codes
  int64_t scale_row_bytes = 0;  // one (group, token) row of block scales (NVFP4 only)
  PageRegion k_codes, k_scales, v_codes, v_scales;
  int64_t page_bytes = 0;

  constexpr int64_t vector_elems() const { return int64_t{heads} * head_dim; }
  constexpr int heads_per_group() const { return heads / groups; }

  // Offset in the page of the first code of (token, head) in `codes` (k_codes or v_codes).
  // The head's values follow contiguously.
  constexpr int64_t code_offset(const PageRegion& codes, int token, int head) const {
    return codes.offset + row_index(token, head) * code_row_bytes +
           first_elem_in_group(head) * code_row_bytes / group_elems;
  }
  // Offset in the page of the block scale covering (token, head)'s first value in `scales`
  // (NVFP4 only). When flattened, heads of one token share blocks, hence share scales.
  constexpr int64_t scale_offset(const PageRegion& scales, int token, int head) const {
    return scales.offset + row_index(token, head) * scale_row_bytes +
           first_elem_in_group(head) / kNvfp4BlockElems;
  }

 private:
  constexpr int64_t row_index(int token, int head) const {
    return int64_t{head / heads_per_group()} * page_tokens + token;
  }
  constexpr int64_t first_elem_in_group(int head) const {
    return int64_t{head % heads_per_group()} * head_dim;
  }
};

// Bytes of `elems` values in a format, scales excluded (NVFP4: half a byte per value).
constexpr int64_t page_code_bytes(PageDType dtype, int64_t elems) {
  switch (dtype) {
    case PageDType::kFP32: return 4 * elems;
    case PageDType::kBF16: return 2 * elems;
    case PageDType::kFP8: return elems;
    case PageDType::kNVFP4: return nvfp4_code_bytes(1, elems);
  }
  return 0;
}

constexpr int64_t page_scale_bytes(PageDType dtype, int64_t elems) {
  return dtype == PageDType::kNVFP4 ? nvfp4_scale_bytes(1, elems) : 0;
}

// The layout arithmetic without argument checks, usable in static_asserts; the engine calls
// kv_page_layout / index_page_layout below, which check first.
constexpr PageLayout make_page_layout(PageDType dtype, int heads, int head_dim, bool has_v,
                                      int page_tokens = kPageTokens) {
  PageLayout l;
  l.dtype = dtype;
  l.has_v = has_v;
  l.heads = heads;
  l.head_dim = head_dim;
  l.page_tokens = page_tokens;
  const bool per_head = head_dim % kNvfp4BlockElems == 0;
  l.groups = per_head ? heads : 1;
  l.group_elems = per_head ? head_dim : heads * head_dim;
  l.code_row_bytes = page_code_bytes(dtype, l.group_elems);
  l.scale_row_bytes = page_scale_bytes(dtype, l.group_elems);
  const int64_t rows = int64_t{l.groups} * page_tokens;
  l.k_codes = {0, rows * l.code_row_bytes};
  l.k_scales = {l.k_codes.offset + l.k_codes.bytes, rows * l.scale_row_bytes};
  const int64_t k_end = l.k_scales.offset + l.k_scales.bytes;
  l.v_codes = {k_end, has_v ? l.k_codes.bytes : 0};
  l.v_scales = {l.v_codes.offset + l.v_codes.bytes, has_v ? l.k_scales.bytes : 0};
  l.page_bytes = l.v_scales.offset + l.v_scales.bytes;
  return l;
}

// The main K/V page of one layer: `kv_heads` is the count on this GPU (kv_layout's
// kv_heads_per_gpu). Throws fp4::Error for non-positive sizes, and for an NVFP4 group whose
// length is not a multiple of 16.
PageLayout kv_page_layout(PageDType dtype, int kv_heads, int head_dim,
                          int page_tokens = kPageTokens);

// The key-only index page of one MSA layer: one head of index_head_dim values per token.
PageLayout index_page_layout(PageDType dtype, int index_head_dim, int page_tokens = kPageTokens);

// MiniMax-M3: 4 KV heads of 128 dims, one 128-wide index-K head.
static_assert(make_page_layout(PageDType::kNVFP4, 4, 128, true).page_bytes == 73'728);
static_assert(make_page_layout(PageDType::kNVFP4, 4, 128, true).k_scales.offset == 32'768);
static_assert(make_page_layout(PageDType::kNVFP4, 4, 128, true).v_codes.offset == 36'864);
static_assert(make_page_layout(PageDType::kNVFP4, 4, 128, true).v_scales.offset == 69'632);
static_assert(make_page_layout(PageDType::kNVFP4, 1, 128, false).page_bytes == 9'216);
static_assert(make_page_layout(PageDType::kNVFP4, 1, 128, false).k_scales.offset == 8'192);
static_assert(make_page_layout(PageDType::kFP8, 4, 128, true).page_bytes == 131'072);
static_assert(make_page_layout(PageDType::kBF16, 4, 128, true).page_bytes == 262'144);
static_assert(make_page_layout(PageDType::kBF16, 1, 128, false).page_bytes == 32'768);
// A tiny model (4 KV heads of 8 dims): one flattened 32-value group, two NVFP4 blocks per token.
static_assert(make_page_layout(PageDType::kNVFP4, 4, 8, true).groups == 1);
static_assert(make_page_layout(PageDType::kNVFP4, 4, 8, true).page_bytes == 2 * 128 * (16 + 2));

}  // namespace fp4::kvcache
