// Contracts of the ops one forward pass of the model family is made of. Each op takes a plain
// params struct of pointers, sizes and strides; pointers are host memory for the CPU backend and
// device memory for the CUDA backend. The CPU implementation is the reference every other
// backend is tested against, so each contract states its arithmetic exactly where it matters.
//
// Token-major activations: one row per token in the step, all sequences of the step flattened.
// Paged caches hold 128-token pages laid out as kvcache/page_layout.h describes; a sequence's
// block table maps its logical block b (tokens [128b, 128b + 127]) to a page of the pool.
#pragma once

#include <cstdint>

#include "kvcache/page_io.h"
#include "kvcache/page_layout.h"

namespace fp4 {

// y[m, n] = x[m, k] . w[n, k]^T, FP32 in, FP32 accumulation and out. The weight is row-major
// [out, in], as Hugging Face stores a Linear.
struct LinearParams {
  const float* x = nullptr;  // [m, k]
  const float* w = nullptr;  // [n, k]
  float* y = nullptr;        // [m, n]; must not alias x
  int64_t m = 0, n = 0, k = 0;
};

// RMSNorm over each row of `dim` values: y = x / sqrt(mean(x^2) + eps) * (gemma ? 1 + w : w).
// Rows may be heads (per-head QK norm): rows = tokens x heads, dim = head_dim. y may equal x.
struct RmsNormParams {
  const float* x = nullptr;       // [rows, dim]
  const float* weight = nullptr;  // [dim]
  float* y = nullptr;             // [rows, dim]
  int64_t rows = 0, dim = 0;
  float eps = 1e-6f;
  bool gemma = false;
};

// Half-split ("NeoX") rotary embedding on the first rotary_dim dims of every head, in place:
// pair (j, j + rotary_dim/2) rotates by angle p * theta^(-2j/rotary_dim), computed in double and
// its cos/sin rounded to float, for j < rotary_dim / 2.
struct RopeParams {
  float* x = nullptr;                 // [tokens, heads, head_dim]
  const int32_t* positions = nullptr; // [tokens]
  int64_t tokens = 0, heads = 0, head_dim = 0, rotary_dim = 0;
  double theta = 10000.0;
};

enum class GatedActivation : uint8_t {
  kSilu,       // silu(g) * u
  kSwigluOai,  // g' = min(g, limit); g' * sigmoid(alpha g') * (clamp(u, -limit, limit) + beta)
};

// out[m, i] = act(gate[m, i], up[m, i]).
struct GatedActivationParams {
  const float* gate = nullptr;  // [m, inter], row stride `stride`
  const float* up = nullptr;    // [m, inter], row stride `stride`
  float* out = nullptr;         // [m, inter], dense
  int64_t m = 0, inter = 0, stride = 0;
  GatedActivation kind = GatedActivation::kSilu;
  float alpha = 1.702f, limit = 7.0f, beta = 1.0f;
};

// Writes tokens' K (and V) into their cache slots; slot = page * page_tokens + offset in page.
// Index caches have no V (v == nullptr, layout.has_v false).
struct CacheInsertParams {
  const kvcache::PageLayout* layout = nullptr;
  uint8_t* pool = nullptr;        // [num_pages, layout.page_bytes]
  int64_t num_pages = 0;
  const float* k = nullptr;       // [tokens, heads, head_dim]
  const float* v = nullptr;       // [tokens, heads, head_dim] or nullptr
  const int64_t* slots = nullptr; // [tokens]
  int64_t tokens = 0;
  kvcache::KvScales scales;
};

// Where each query token of a step reads its keys from: token t belongs to sequence
// seq_of_token[t], sits at absolute position positions[t], and sees keys 0..positions[t] of its
// sequence, whose pages are block_tables[seq * max_blocks + b].
struct PagedContext {
  const int32_t* positions = nullptr;     // [tokens]
  const int32_t* seq_of_token = nullptr;  // [tokens]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks]
  int64_t tokens = 0;
  int64_t num_seqs = 0;
  int64_t max_blocks = 0;
};

// MSA indexer: for index head h (paired with KV head h) and query token t, block b's score is
// max over its keys j <= positions[t] of index_q[t, h] . index_k[j] (FP32, no scale). The forced
// blocks (init blocks [0, init_blocks) and the local_blocks blocks ending at the query's own) are
// always selected; the other slots take the highest scores, ties to the lower block id. When the
// visible blocks number topk or fewer, all are selected. Output: logical block ids in ascending
// order, padded with -1, at selected[(h * tokens + t) * topk + i].
struct IndexerTopkParams {
  PagedContext ctx;
  const kvcache::PageLayout* layout = nullptr;  // the index cache's
  const uint8_t* pool = nullptr;               // [num_pages, layout.page_bytes]
  int64_t num_pages = 0;
  float scale = 1.0f;                           // FP8 index cache scale
  const float* index_q = nullptr;               // [tokens, heads, head_dim]
  int64_t heads = 0, head_dim = 0;
  int64_t topk = 16, init_blocks = 0, local_blocks = 1;
  int32_t* selected = nullptr;                  // [heads, tokens, topk]
};

// Causal GQA attention of query token t over its sequence's paged K/V: query head h reads KV
// head h / (q_heads / kv_heads), keys j <= positions[t]; with `selected`, only keys inside the
// listed blocks (per KV head and token, -1 entries ignored). Softmax of q.k * softmax_scale in
// FP32; output [tokens, q_heads, head_dim].
struct PagedAttentionParams {
  PagedContext ctx;
  const kvcache::PageLayout* layout = nullptr;
  const uint8_t* pool = nullptr;         // [num_pages, layout.page_bytes]
  int64_t num_pages = 0;
  kvcache::KvScales scales;
  const float* q = nullptr;              // [tokens, q_heads, head_dim]
  float* out = nullptr;                  // [tokens, q_heads, head_dim]
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  float softmax_scale = 1.0f;
  const int32_t* selected = nullptr;     // [kv_heads, tokens, topk] or nullptr for dense
  int64_t topk = 0;
};

// MoE routing: s = sigmoid(logits); the top_k experts by s + bias (bias may be null; ties to the
// lower expert id) are chosen, in descending order of s + bias, with weights s / sum(s chosen).
struct RouterParams {
  const float* logits = nullptr;  // [tokens, experts], FP32
  const float* bias = nullptr;    // [experts] or nullptr
  int64_t tokens = 0, experts = 0, top_k = 0;
  int32_t* expert_ids = nullptr;  // [tokens, top_k]
  float* weights = nullptr;       // [tokens, top_k]
};

}  // namespace fp4
