#include "kvcache/page_layout.h"

#include "core/check.h"

namespace fp4::kvcache {

std::string_view page_dtype_name(PageDType dtype) {
  switch (dtype) {
    case PageDType::kFP32: return "fp32";
    case PageDType::kBF16: return "bf16";
    case PageDType::kFP8: return "fp8";
    case PageDType::kNVFP4: return "nvfp4";
  }
  return "?";
}

PageDType page_dtype(CacheDType dtype) {
  switch (dtype) {
    case CacheDType::kBF16: return PageDType::kBF16;
    case CacheDType::kFP8: return PageDType::kFP8;
    case CacheDType::kNVFP4: return PageDType::kNVFP4;
    case CacheDType::kNone: break;
  }
  fail("cache format '{}' stores nothing and has no page layout", cache_dtype_name(dtype));
}

namespace {

PageLayout checked_layout(std::string_view pool, PageDType dtype, int heads, int head_dim,
                          bool has_v, int page_tokens) {
  FP4_CHECK(heads > 0 && head_dim > 0, "{} page needs positive heads and head_dim, got {} and {}",
            pool, heads, head_dim);
  FP4_CHECK(page_tokens > 0, "{} page needs a positive page_tokens, got {}", pool, page_tokens);
  const PageLayout layout = make_page_layout(dtype, heads, head_dim, has_v, page_tokens);
  if (dtype == PageDType::kNVFP4) {
    // Blocks run per head when head_dim allows it, otherwise along the flattened vector, which
    // then must hold whole blocks; heads must also start on whole bytes of codes.
    FP4_CHECK(layout.group_elems % kNvfp4BlockElems == 0,
              "NVFP4 {} page: head_dim {} is not a multiple of {}, so blocks run along the "
              "flattened per-token vector of {} heads x {} = {} values, which is not a multiple "
              "of {} either",
              pool, head_dim, kNvfp4BlockElems, heads, head_dim, layout.group_elems,
              kNvfp4BlockElems);
    FP4_CHECK(head_dim % 2 == 0, "NVFP4 {} page needs an even head_dim (two codes a byte), got {}",
              pool, head_dim);
  }
  return layout;
}

}  // namespace

PageLayout kv_page_layout(PageDType dtype, int kv_heads, int head_dim, int page_tokens) {
  return checked_layout("K/V", dtype, kv_heads, head_dim, true, page_tokens);
}

PageLayout index_page_layout(PageDType dtype, int index_head_dim, int page_tokens) {
  return checked_layout("index-K", dtype, 1, index_head_dim, false, page_tokens);
}

}  // namespace fp4::kvcache
