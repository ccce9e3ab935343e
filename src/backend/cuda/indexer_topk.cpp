#include "backend/cuda/indexer_topk.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <tuple>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/stream_scratch.h"

namespace fp4::cuda {
namespace {

using kvcache::PageDType;

// Fewest blocks a scoring CTA covers: below this the query load and the CTA's start cost more
// than the extra parallelism gives back.
constexpr int64_t kMinBlocksPerSplit = 2;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

detail::IndexerArgs checked_args(const IndexerTopkParams& p, const IndexerTopkOptions& options) {
  const PagedContext& c = p.ctx;
  FP4_CHECK(p.layout != nullptr, "indexer_topk: the index page layout is missing");
  const kvcache::PageLayout& l = *p.layout;
  FP4_CHECK(!l.has_v && l.heads == 1 && l.groups == 1,
            "indexer_topk: expected a key-only index page layout of one head, got {} head(s){}",
            l.heads, l.has_v ? " with V" : "");
  FP4_CHECK(l.head_dim == p.head_dim, "indexer_topk: index_q has head_dim {} but the index pages "
            "hold {} values per token", p.head_dim, l.head_dim);
  FP4_CHECK(p.head_dim == 16 || p.head_dim == 32 || p.head_dim == 64 || p.head_dim == 128 ||
                p.head_dim == 256,
            "indexer_topk: the CUDA kernels take index head_dim 16, 32, 64, 128 or 256, got {}",
            p.head_dim);
  FP4_CHECK(l.dtype != PageDType::kFP8 || (std::isfinite(p.scale) && p.scale > 0.0f),
            "indexer_topk: the FP8 index-K scale must be finite and positive, got {}", p.scale);
  FP4_CHECK(l.dtype != PageDType::kNVFP4 || p.scale == 1.0f,
            "indexer_topk: NVFP4 index-K pages have no global scale, got {}", p.scale);
  FP4_CHECK(p.query_format == IndexQueryFormat::kFP32 || p.query_format == IndexQueryFormat::kE4M3 ||
                p.query_format == IndexQueryFormat::kE4M3x2,
            "indexer_topk: unknown index query format {}", static_cast<int>(p.query_format));
  FP4_CHECK(c.tokens >= 0 && c.tokens < (int64_t{1} << 31),
            "indexer_topk: {} tokens, expected 0 to 2^31 - 1", c.tokens);
  FP4_CHECK(p.heads > 0 && p.heads <= 65535, "indexer_topk: {} index heads, expected 1 to 65535",
            p.heads);
  FP4_CHECK(p.topk > 0 && p.topk <= detail::kMaxTopk, "indexer_topk: topk {} is outside 1..{}",
            p.topk, detail::kMaxTopk);
  FP4_CHECK(p.init_blocks >= 0 && p.local_blocks >= 0 && p.init_blocks + p.local_blocks <= p.topk,
            "indexer_topk: {} init + {} local forced blocks do not fit in top-{}", p.init_blocks,
            p.local_blocks, p.topk);
  FP4_CHECK(c.max_blocks > 0 && c.max_blocks <= detail::kMaxBlocks,
            "indexer_topk: the block table has {} entries per sequence, expected 1 to {}",
            c.max_blocks, detail::kMaxBlocks);
  FP4_CHECK(c.tokens == 0 || (c.positions && c.seq_of_token && c.block_tables && c.num_seqs > 0),
            "indexer_topk: positions, seq_of_token and block_tables are required ({} sequences)",
            c.num_seqs);
  FP4_CHECK(c.tokens == 0 || (p.pool && p.index_q && p.selected && p.num_pages > 0),
            "indexer_topk: the pool ({} pages), index_q and selected are required", p.num_pages);
  FP4_CHECK(l.page_tokens > 0 && l.page_tokens <= detail::kMaxPageTokens,
            "indexer_topk: the CUDA kernels take pages of up to {} tokens, got {}",
            detail::kMaxPageTokens, l.page_tokens);
  // Pages are copied in 16-byte pieces (every layout of 128-token pages qualifies).
  FP4_CHECK(aligned16(p.pool) && l.page_bytes % 16 == 0 && l.k_scales.offset % 16 == 0 &&
                l.k_codes.bytes % 16 == 0 && l.k_scales.bytes % 16 == 0,
            "indexer_topk: the pool, its {}-byte pages and their regions must be 16-byte aligned",
            l.page_bytes);

  detail::IndexerArgs a;
  a.positions = c.positions;
  a.seq_of_token = c.seq_of_token;
  a.block_tables = c.block_tables;
  a.tokens = c.tokens;
  a.max_blocks = c.max_blocks;
  a.pool = p.pool;
  a.num_pages = p.num_pages;
  a.page_bytes = l.page_bytes;
  a.codes_offset = l.k_codes.offset;
  a.scales_offset = l.k_scales.offset;
  a.page_tokens = l.page_tokens;
  a.dtype = l.dtype;
  a.scale = p.scale;
  a.index_q = p.index_q;
  a.query_format = p.query_format;
  a.heads = static_cast<int>(p.heads);
  a.head_dim = static_cast<int>(p.head_dim);
  a.topk = static_cast<int>(p.topk);
  a.init_blocks = static_cast<int>(p.init_blocks);
  a.local_blocks = static_cast<int>(p.local_blocks);
  a.selected = p.selected;
  a.tensor_cores = options.math != IndexerMath::kExact;
  a.fp8_mma = options.math == IndexerMath::kFp8TensorCores;
  a.radix_select = options.select == IndexerSelect::kRadix;
  FP4_CHECK(detail::indexer_score_smem_bytes(a) <= detail::kMaxScoreSmem,
            "indexer_topk: {} index heads of {} values do not fit in shared memory beside the "
            "pages", p.heads, p.head_dim);
  return a;
}

// Splits of each token's blocks over CTAs: enough CTAs to fill the device once, never fewer
// than kMinBlocksPerSplit blocks each. Depends on shapes and the device only.
// Resident scoring CTAs per device, by kernel variant: the occupancy query costs microseconds
// of host time, which an eager decode step would pay per layer.
int64_t resident_ctas(const detail::IndexerArgs& a) {
  struct Key {
    int device;
    kvcache::PageDType dtype;
    int head_dim, heads, page_tokens;
    bool tensor_cores;
    bool fp8_kernel, fp8_query;
    bool operator<(const Key& o) const {
      return std::tie(device, dtype, head_dim, heads, page_tokens, tensor_cores, fp8_kernel, fp8_query) <
             std::tie(o.device, o.dtype, o.head_dim, o.heads, o.page_tokens, o.tensor_cores, o.fp8_kernel,
                      o.fp8_query);
    }
  };
  thread_local std::map<Key, int64_t> cache;
  Key key{0, a.dtype, a.head_dim, a.heads, a.page_tokens, detail::indexer_score_on_tensor_cores(a),
          detail::fp8_score_variant(a).kernel != nullptr, a.query_format != IndexQueryFormat::kFP32};
  FP4_CUDA_CHECK(cudaGetDevice(&key.device));
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int ctas_per_sm = 0, sms = 0;
  FP4_CUDA_CHECK(detail::indexer_score_ctas_per_sm(a, ctas_per_sm));
  FP4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, key.device));
  return cache[key] = int64_t{std::max(ctas_per_sm, 1)} * sms;
}

unsigned choose_splits(detail::IndexerArgs& a) {
  const int64_t resident = resident_ctas(a);
  const int64_t most = (a.max_blocks + kMinBlocksPerSplit - 1) / kMinBlocksPerSplit;
  // Rounded down: tokens x splits must not pass one wave, or a second wave of a few CTAs runs
  // as long as the first (every CTA walks the same number of pages).
  const int64_t wanted = std::clamp<int64_t>(resident / a.tokens, 1, most);
  a.blocks_per_split = static_cast<int>((a.max_blocks + wanted - 1) / wanted);
  return static_cast<unsigned>((a.max_blocks + a.blocks_per_split - 1) / a.blocks_per_split);
}

}  // namespace

size_t indexer_topk_workspace_bytes(const IndexerTopkParams& p) {
  return static_cast<size_t>(std::max<int64_t>(p.ctx.tokens, 0) * std::max<int64_t>(p.heads, 0) *
                             std::max<int64_t>(p.ctx.max_blocks, 0)) * sizeof(float);
}

size_t indexer_topk_workspace_bytes(const IndexerTopkParams& p, const IndexerTopkOptions& options) {
  return checked_args(p, options).tokens == 0 ? 0 : indexer_topk_workspace_bytes(p);
}

void indexer_topk(const IndexerTopkParams& p, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream, const IndexerTopkOptions& options) {
  detail::IndexerArgs a = checked_args(p, options);
  if (a.tokens == 0) return;
  const size_t needed = indexer_topk_workspace_bytes(p);
  FP4_CHECK(workspace != nullptr && workspace_bytes >= needed && aligned16(workspace),
            "indexer_topk: the workspace must be 16-byte aligned and hold {} bytes, got {}",
            needed, workspace_bytes);
  a.scores = static_cast<float*>(workspace);
  const unsigned splits = choose_splits(a);
  FP4_CUDA_CHECK(detail::launch_indexer_scores(a, splits, stream));
  FP4_CUDA_CHECK(detail::launch_indexer_select(a, stream));
}

bool indexer_uses_tensor_cores(const IndexerTopkParams& p, const IndexerTopkOptions& options) {
  return detail::indexer_score_on_tensor_cores(checked_args(p, options));
}

void indexer_topk(const IndexerTopkParams& p, cudaStream_t stream, const IndexerTopkOptions& options) {
  if (checked_args(p, options).tokens == 0) return;
  with_stream_scratch(indexer_topk_workspace_bytes(p), stream, [&](void* workspace, size_t bytes) {
    indexer_topk(p, workspace, bytes, stream, options);
  });
}

}  // namespace fp4::cuda
