#include "backend/cuda/cache_insert.h"

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace fp4::cuda {
namespace {

using kvcache::PageDType;

void check_scale(PageDType dtype, float scale, const char* name) {
  if (dtype != PageDType::kFP8 && dtype != PageDType::kNVFP4) return;
  FP4_CHECK(std::isfinite(scale) && scale > 0.0f,
            "cache_insert: the {} {} scale must be finite and positive, got {}",
            kvcache::page_dtype_name(dtype), name, scale);
}

}  // namespace

void cache_insert(const CacheInsertParams& p, cudaStream_t stream) {
  FP4_CHECK(p.layout != nullptr, "cache_insert: the page layout is missing");
  const kvcache::PageLayout& l = *p.layout;
  FP4_CHECK(l.groups > 0 && l.group_elems > 0 && l.page_bytes > 0, "cache_insert: the page layout is empty");
  FP4_CHECK(l.has_v == (p.v != nullptr), "cache_insert: V given for a K-only cache or missing");
  FP4_CHECK(l.dtype != PageDType::kNVFP4 || l.group_elems % kNvfp4BlockElems == 0,
            "cache_insert: NVFP4 groups of {} values are not whole 16-value blocks", l.group_elems);
  check_scale(l.dtype, p.scales.k, l.has_v ? "K" : "index-K");
  if (l.has_v) check_scale(l.dtype, p.scales.v, "V");
  FP4_CHECK(l.has_v || l.dtype != PageDType::kNVFP4 || p.scales.k == 1.0f,
            "cache_insert: NVFP4 index-K pages have no global scale, got {}", p.scales.k);
  FP4_CHECK(p.tokens >= 0, "cache_insert: {} tokens", p.tokens);
  if (p.tokens == 0) return;
  FP4_CHECK(p.pool && p.k && p.slots && p.num_pages > 0,
            "cache_insert: the pool ({} pages), K and slots are required", p.num_pages);

  detail::InsertArgs a;
  a.pool = p.pool;
  a.num_pages = p.num_pages;
  a.page_bytes = l.page_bytes;
  a.code_row_bytes = l.code_row_bytes;
  a.scale_row_bytes = l.scale_row_bytes;
  a.codes_offset[0] = l.k_codes.offset;
  a.scales_offset[0] = l.k_scales.offset;
  a.codes_offset[1] = l.v_codes.offset;
  a.scales_offset[1] = l.v_scales.offset;
  a.page_tokens = l.page_tokens;
  a.groups = l.groups;
  a.group_elems = l.group_elems;
  a.chunks = (l.group_elems + kNvfp4BlockElems - 1) / kNvfp4BlockElems;
  a.planes = l.has_v ? 2 : 1;
  a.dtype = l.dtype;
  a.src[0] = p.k;
  a.src[1] = p.v;
  a.scale[0] = p.scales.k;
  a.scale[1] = p.scales.v;
  a.slots = p.slots;
  a.tokens = p.tokens;
  a.vector_elems = l.vector_elems();
  const int64_t threads = p.tokens * a.planes * a.groups * a.chunks;
  FP4_CHECK(threads < (int64_t{1} << 32) - detail::kInsertThreads,
            "cache_insert: {} tokens of {} blocks each exceed one launch", p.tokens,
            threads / p.tokens);
  FP4_CUDA_CHECK(detail::launch_cache_insert(a, stream));
}

}  // namespace fp4::cuda
