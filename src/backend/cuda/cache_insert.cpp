#include "backend/cuda/cache_insert.h"

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"

namespace fp4::cuda {
namespace {

using kvcache::PageDType;

void check_scale(PageDType dtype, float scale, const char* op, const char* name) {
  if (dtype != PageDType::kFP8 && dtype != PageDType::kNVFP4) return;
  FP4_CHECK(std::isfinite(scale) && scale > 0.0f, "{}: the {} {} scale must be finite and positive, got {}", op,
            kvcache::page_dtype_name(dtype), name, scale);
}

}  // namespace

namespace detail {

CacheTarget cache_target(const kvcache::PageLayout& l, uint8_t* pool, int64_t num_pages, kvcache::KvScales scales,
                         const char* op) {
  FP4_CHECK(l.groups > 0 && l.group_elems > 0 && l.page_bytes > 0, "{}: the page layout is empty", op);
  FP4_CHECK(l.dtype != PageDType::kNVFP4 || l.group_elems % kNvfp4BlockElems == 0,
            "{}: NVFP4 groups of {} values are not whole 16-value blocks", op, l.group_elems);
  check_scale(l.dtype, scales.k, op, l.has_v ? "K" : "index-K");
  if (l.has_v) check_scale(l.dtype, scales.v, op, "V");
  FP4_CHECK(l.has_v || l.dtype != PageDType::kNVFP4 || scales.k == 1.0f,
            "{}: NVFP4 index-K pages have no global scale, got {}", op, scales.k);
  CacheTarget c;
  c.pool = pool;
  c.num_pages = num_pages;
  c.page_bytes = l.page_bytes;
  c.code_row_bytes = l.code_row_bytes;
  c.scale_row_bytes = l.scale_row_bytes;
  c.codes_offset[0] = l.k_codes.offset;
  c.scales_offset[0] = l.k_scales.offset;
  c.codes_offset[1] = l.v_codes.offset;
  c.scales_offset[1] = l.v_scales.offset;
  c.page_tokens = l.page_tokens;
  c.groups = l.groups;
  c.group_elems = l.group_elems;
  c.chunks = (l.group_elems + kNvfp4BlockElems - 1) / kNvfp4BlockElems;
  c.planes = l.has_v ? 2 : 1;
  c.dtype = l.dtype;
  c.scale[0] = scales.k;
  c.scale[1] = scales.v;
  return c;
}

}  // namespace detail

void cache_insert(const CacheInsertParams& p, cudaStream_t stream) {
  FP4_CHECK(p.layout != nullptr, "cache_insert: the page layout is missing");
  const kvcache::PageLayout& l = *p.layout;
  FP4_CHECK(l.has_v == (p.v != nullptr), "cache_insert: V given for a K-only cache or missing");
  detail::InsertArgs a;
  a.cache = detail::cache_target(l, p.pool, p.num_pages, p.scales, "cache_insert");
  FP4_CHECK(p.tokens >= 0, "cache_insert: {} tokens", p.tokens);
  if (p.tokens == 0) return;
  FP4_CHECK(p.pool && p.k && p.slots && p.num_pages > 0,
            "cache_insert: the pool ({} pages), K and slots are required", p.num_pages);
  a.src[0] = p.k;
  a.src[1] = p.v;
  a.slots = p.slots;
  a.tokens = p.tokens;
  a.vector_elems = l.vector_elems();
  const int64_t threads = p.tokens * a.cache.planes * a.cache.groups * a.cache.chunks;
  FP4_CHECK(threads < (int64_t{1} << 32) - detail::kInsertThreads,
            "cache_insert: {} tokens of {} blocks each exceed one launch", p.tokens,
            threads / p.tokens);
  FP4_CUDA_CHECK(detail::launch_cache_insert(a, stream));
}

}  // namespace fp4::cuda
