#include "kvcache/sizing.h"

#include <cmath>

#include "core/check.h"
#include "core/int_math.h"

namespace fp4::kvcache {

KvLayout kv_layout(const KvGeometry& g, const KvDTypes& dtypes, int tp) {
  FP4_CHECK(g.num_kv_heads > 0 && g.head_dim > 0,
            "KV geometry needs positive num_kv_heads and head_dim, got {} and {}", g.num_kv_heads,
            g.head_dim);
  FP4_CHECK(g.num_dense_layers >= 0 && g.num_sparse_layers >= 0 &&
                g.num_dense_layers + g.num_sparse_layers > 0,
            "KV geometry needs at least one attention layer, got {} dense and {} sparse",
            g.num_dense_layers, g.num_sparse_layers);
  FP4_CHECK(g.num_sparse_layers == 0 || g.index_head_dim > 0,
            "sparse layers need a positive index_head_dim, got {}", g.index_head_dim);
  FP4_CHECK(g.page_tokens > 0, "page_tokens must be positive, got {}", g.page_tokens);
  FP4_CHECK(tp > 0, "tensor-parallel size must be positive, got {}", tp);
  FP4_CHECK(g.num_kv_heads % tp == 0 || tp % g.num_kv_heads == 0,
            "tensor-parallel size {} must divide, or be a multiple of, the {} KV heads", tp,
            g.num_kv_heads);
  FP4_CHECK(dtypes.kv != CacheDType::kNone, "the main K/V cache cannot be 'none'");

  KvLayout layout;
  layout.geometry = g;
  layout.dtypes = dtypes;
  layout.tp = tp;
  layout.kv_heads_per_gpu = g.num_kv_heads >= tp ? g.num_kv_heads / tp : 1;
  // NVFP4 blocks run along the flattened vector of a token's KV heads, so head_dim need not be
  // a multiple of 16 as long as the per-GPU vector is (see docs/formats/).
  const int64_t kv_vector = int64_t{layout.kv_heads_per_gpu} * g.head_dim;
  const int64_t kv = 2 * cache_vector_bytes(dtypes.kv, kv_vector);  // K and V
  layout.dense = {g.num_dense_layers, kv, 0};
  layout.sparse = {g.num_sparse_layers, kv,
                   g.num_sparse_layers > 0 ? cache_vector_bytes(dtypes.index, g.index_head_dim)
                                           : 0};
  return layout;
}

int64_t pages_for_tokens(int64_t tokens, int page_tokens) {
  FP4_CHECK(tokens >= 0 && page_tokens > 0, "pages_for_tokens({}, {})", tokens, page_tokens);
  return ceil_div(tokens, page_tokens);
}

int64_t kv_budget_bytes(int64_t gpu_memory_bytes, double utilization, int64_t non_kv_bytes) {
  FP4_CHECK(gpu_memory_bytes > 0, "GPU memory must be positive, got {} bytes", gpu_memory_bytes);
  FP4_CHECK(utilization > 0.0 && utilization <= 1.0,
            "gpu-memory-utilization must be in (0, 1], got {}", utilization);
  FP4_CHECK(non_kv_bytes >= 0, "non-KV memory cannot be negative, got {} bytes", non_kv_bytes);
  const auto requested =
      static_cast<int64_t>(std::ceil(static_cast<double>(gpu_memory_bytes) * utilization));
  return requested - non_kv_bytes;
}

KvPool size_kv_pool(const KvLayout& layout, int64_t budget_bytes, int64_t max_model_len) {
  FP4_CHECK(max_model_len > 0, "max-model-len must be positive, got {}", max_model_len);
  KvPool pool;
  pool.page_bytes = layout.bytes_per_page();
  FP4_CHECK(pool.page_bytes > 0, "a KV page must have a positive size");
  pool.num_pages = budget_bytes > 0 ? budget_bytes / pool.page_bytes : 0;
  pool.tokens = pool.num_pages * layout.geometry.page_tokens;
  pool.pages_per_seq = pages_for_tokens(max_model_len, layout.geometry.page_tokens);
  pool.max_seqs = pool.num_pages / pool.pages_per_seq;
  pool.concurrency = static_cast<double>(pool.num_pages) / static_cast<double>(pool.pages_per_seq);
  return pool;
}

}  // namespace fp4::kvcache
