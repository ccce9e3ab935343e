// KV-cache sizing: bytes per token and per page for each kind of attention layer, and how many
// pages and whole sequences a memory budget holds. The engine sizes its page pool with these
// functions and `fp4serve plan` prints their results, so the two always agree.
//
// Page = 128 tokens = one MSA block. One logical page id addresses every layer's main K/V pool
// and, on MSA layers, the key-only index pool, so "a page" below means one page of all of them.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvcache/cache_dtype.h"

namespace fp4::kvcache {

constexpr int kPageTokens = 128;

// The model's attention geometry, free of any config-file format.
struct KvGeometry {
  int num_kv_heads = 0;       // main K/V heads of the whole model (GQA groups)
  int head_dim = 0;
  int num_dense_layers = 0;   // full causal attention: main K/V only
  int num_sparse_layers = 0;  // MSA: main K/V plus one index-K vector per token
  int index_head_dim = 0;     // width of the single index-K head (sparse layers only)
  int page_tokens = kPageTokens;
};

struct KvDTypes {
  CacheDType kv = CacheDType::kBF16;
  CacheDType index = CacheDType::kBF16;
};

// Bytes of one token in one layer of a kind, on one GPU.
struct LayerKindBytes {
  int layers = 0;
  int64_t kv = 0;     // K and V together
  int64_t index = 0;  // index K (0 on dense layers)
};

// Per-token cache bytes on one GPU of a tensor-parallel group of size tp. TP splits the KV
// heads (a head is replicated when tp exceeds the head count) but never the index-K cache:
// it has a single head, so every TP rank holds all of it.
struct KvLayout {
  KvGeometry geometry;
  KvDTypes dtypes;
  int tp = 1;
  int kv_heads_per_gpu = 0;
  LayerKindBytes dense;
  LayerKindBytes sparse;

  int64_t kv_bytes_per_token() const {
    return dense.layers * dense.kv + sparse.layers * sparse.kv;
  }
  int64_t index_bytes_per_token() const { return sparse.layers * sparse.index; }
  int64_t bytes_per_token() const { return kv_bytes_per_token() + index_bytes_per_token(); }
  int64_t bytes_per_page() const { return geometry.page_tokens * bytes_per_token(); }
};

KvLayout kv_layout(const KvGeometry& geometry, const KvDTypes& dtypes, int tp = 1);

// Pages a sequence of `tokens` tokens occupies: a partly filled page is still a whole page.
int64_t pages_for_tokens(int64_t tokens, int page_tokens = kPageTokens);

// The bytes an engine may give the KV pool on one GPU, as vLLM computes it:
// ceil(total x utilization) - (weights + activation peak + other non-KV memory). May be
// negative, which means nothing fits.
int64_t kv_budget_bytes(int64_t gpu_memory_bytes, double utilization, int64_t non_kv_bytes);

// One GPU's page pool for a budget, and what it holds at max_model_len.
struct KvPool {
  int64_t page_bytes = 0;     // one page of every layer's caches on this GPU
  int64_t num_pages = 0;
  int64_t tokens = 0;         // num_pages x page_tokens ("GPU KV cache size")
  int64_t pages_per_seq = 0;  // pages_for_tokens(max_model_len)
  int64_t max_seqs = 0;       // whole sequences of max_model_len that fit at once
  double concurrency = 0.0;   // num_pages / pages_per_seq ("Maximum concurrency ... x")
};

KvPool size_kv_pool(const KvLayout& layout, int64_t budget_bytes, int64_t max_model_len);

}  // namespace fp4::kvcache
