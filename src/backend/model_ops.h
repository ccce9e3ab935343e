// Contracts of the ops one forward pass of the model family is made of. Each op takes a plain
// params struct of pointers, sizes and strides; pointers are host memory for the CPU backend and
// device memory for the CUDA backend. The CPU implementation is the reference every other
// backend is tested against, so each contract states its arithmetic exactly where it matters.
//
// Token-major activations: one row per token in the step, all sequences of the step flattened.
// Paged caches hold 128-token pages laid out as kvcache/page_layout.h describes; a sequence's
// block table maps its logical block b (tokens [128b, 128b + 127]) to a page of the pool.
#pragma once

#include <cmath>
#include <cstdint>

#include "kvcache/page_io.h"
#include "kvcache/page_layout.h"

namespace fp4 {

// y[m, n] = x[m, k] . w[n, k]^T, FP32 in, FP32 accumulation and out. The weight is row-major
// [out, in], as Hugging Face stores a Linear, given in FP32 (w); or, when every value of it is
// exactly a BF16, as those BF16 values (w_bf16): the same numbers in half the bytes; or, when
// moreover each run of 32 values along a row is exactly an MXFP8 block (formats/mxfp8.h), as
// E4M3 codes and UE8M0 block scales (w_e4m3, w_scales): the same numbers in 33 bytes per 32
// values, k a multiple of 32. The CPU computes the same bits from any of them; the GPU's paths
// round differently from its FP32 one, within the bounds their tests derive. Exactly one of w,
// w_bf16 and w_e4m3 is given.
struct LinearParams {
  const float* x = nullptr;         // [m, k]
  const float* w = nullptr;         // [n, k]
  float* y = nullptr;               // [m, n]; must not alias x
  int64_t m = 0, n = 0, k = 0;
  const uint16_t* w_bf16 = nullptr;  // [n, k] BF16 bits, instead of w
  const uint8_t* w_e4m3 = nullptr;   // [n, k] E4M3 codes, instead of w, with w_scales
  const uint8_t* w_scales = nullptr; // [n, k / 32] UE8M0
};

// How many of w, w_bf16 and w_e4m3 a LinearParams gives (exactly one is valid).
inline int linear_weight_forms(const LinearParams& p) {
  return (p.w != nullptr) + (p.w_bf16 != nullptr) + (p.w_e4m3 != nullptr);
}

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

// The residual add fused with the RMSNorm that follows it: x += delta (FP32, in place), then
// y = rms_norm(x) with rms_norm's arithmetic. delta == nullptr: the norm alone.
struct AddRmsNormParams {
  float* x = nullptr;             // [rows, dim]
  const float* delta = nullptr;   // [rows, dim] or nullptr
  const float* weight = nullptr;  // [dim]
  float* y = nullptr;             // [rows, dim]; must not alias x or delta
  int64_t rows = 0, dim = 0;
  float eps = 1e-6f;
  bool gemma = false;
};

// out[i] = table[ids[i]]: the embedding lookup, and the picking of the rows whose logits are
// wanted. Every id must be in [0, table_rows).
struct GatherRowsParams {
  const float* table = nullptr;  // [table_rows, dim]
  int64_t table_rows = 0, dim = 0;
  const int32_t* ids = nullptr;  // [count]
  int64_t count = 0;
  float* out = nullptr;          // [count, dim]
  const uint16_t* table_bf16 = nullptr;  // the table in BF16 bits, instead of `table`; widened exactly
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

// The angle step of rotary pair j: theta^(-2j / rotary_dim), in double. Every backend takes its
// frequencies from here, so their angles agree to the bit.
inline double rope_inv_freq(double theta, int64_t rotary_dim, int64_t j) {
  return std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(rotary_dim));
}

enum class GatedActivation : uint8_t {
  kSilu,       // silu(g) * u
  kSwigluOai,  // g' = min(g, limit); g' * sigmoid(alpha g') * (clamp(u, -limit, limit) + beta)
};

// out[m, i] = act(gate[m, i], up[m, i]).
struct GatedActivationParams {
  const float* gate = nullptr;  // [m, inter], row stride `stride`
  const float* up = nullptr;    // [m, inter], row stride `stride`
  float* out = nullptr;         // [m, inter], dense
  uint16_t* out_bf16 = nullptr; // instead of out: BF16 bits (round to nearest even), what the
                                // expert matmul takes
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

// One head family of the pre-attention step: `heads` vectors of `dim` values per token, row r of
// `x` being token r (row stride `stride` floats, so the column ranges of one fused
// [q | k | v | index_q | index_k] GEMM output need no copy). `norm`: per-head RMSNorm weight
// [dim], or nullptr for none.
struct HeadInput {
  const float* x = nullptr;
  int64_t stride = 0;
  const float* norm = nullptr;
};

// One attention layer's fused pre-attention step, what the attention kernels need from the
// projections:
// - q and k (and, in a sparse layer, index_q and index_k) get the per-head RMSNorm (rms_norm's
//   arithmetic; skipped where the weight is null) and then the partial RoPE (rope's);
// - K and V go into the K/V cache and index-K into the index cache, at each token's slot
//   block_tables[seq, position / page_tokens] * page_tokens + position % page_tokens, as
//   cache_insert writes them;
// - q and index_q are written out, normed and rotated, in FP32 (what the attention and indexer
//   kernels take).
// The CPU backend runs rms_norm, rope and cache_insert in turn; a GPU runs one kernel.
struct PreAttentionParams {
  PagedContext ctx;
  HeadInput q, k, v;                  // q_heads / kv_heads / kv_heads heads of head_dim
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  HeadInput index_q, index_k;         // sparse layers: index_heads heads / one head of
  int64_t index_heads = 0, index_head_dim = 0;  // index_head_dim; index_q.x == nullptr: none
  float eps = 1e-6f;
  bool gemma = false;
  int64_t rotary_dim = 0;
  double theta = 10000.0;
  const kvcache::PageLayout* kv_layout = nullptr;
  uint8_t* kv_pool = nullptr;         // [num_pages, kv_layout->page_bytes]
  kvcache::KvScales kv_scales;
  const kvcache::PageLayout* index_layout = nullptr;
  uint8_t* index_pool = nullptr;      // [num_pages, index_layout->page_bytes]
  float index_scale = 1.0f;
  int64_t num_pages = 0;              // pages in each pool
  float* q_out = nullptr;             // [tokens, q_heads, head_dim]; may be q.x if its rows are dense
  float* index_q_out = nullptr;       // [tokens, index_heads, index_head_dim]
  // Optional (nullptr: not written): K and index-K as they went into the caches, normed and
  // rotated, [tokens, kv_heads, head_dim] and [tokens, index_head_dim]. Tests compare the cache
  // bytes against cache_insert run on them.
  float* k_out = nullptr;
  float* index_k_out = nullptr;
};

// MSA indexer: for index head h (paired with KV head h) and query token t, block b's score is
// max over its keys j <= positions[t] of index_q[t, h] . index_k[j] (FP32, no scale). The forced
// blocks (init blocks [0, init_blocks) and the local_blocks blocks ending at the query's own) are
// always selected; the other slots take the highest scores, ties to the lower block id. When the
// visible blocks number topk or fewer, all are selected. Output: logical block ids in ascending
// order, padded with -1, at selected[(h * tokens + t) * topk + i].
//
// The query is scored as given (kFP32) or as the FP8 path rounds it (formats/e4m3_query.h):
// per head and token, one or two E4M3 codes per element, read back exactly. Every backend scores
// the rounded query, so the rounding is part of the result, not an error of one backend.
enum class IndexQueryFormat { kFP32, kE4M3, kE4M3x2 };

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
  IndexQueryFormat query_format = IndexQueryFormat::kFP32;
};

// Causal GQA attention of query token t over its sequence's paged K/V: query head h reads KV
// head h / (q_heads / kv_heads), keys j <= positions[t]; with `selected`, only keys inside the
// listed blocks (per KV head and token, -1 entries ignored). Softmax of q.k * softmax_scale in
// FP32; output [tokens, q_heads, head_dim].
//
// The operands of the two products: Q and the softmax weights as computed in FP32 (kFP32), or
// both rounded to 16 bits (k16Bit; formats/attention_operands.h): each query head before its
// scores, each weight (relative to the running maximum) before it multiplies V, while the
// normalizer sums the FP32 weights. Every backend rounds alike, so the rounding is part of the
// result, not an error of one backend.
enum class AttentionOperands { kFP32, k16Bit };

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
  AttentionOperands operands = AttentionOperands::kFP32;
};

// MoE dispatch: groups a routing's (token, slot) pairs (pair = token * top_k + slot) by
// expert, stably: rows [row_offsets[e], row_offsets[e + 1]) hold expert e's pairs in ascending
// pair order, and pair_of_row / row_of_pair map between a grouped row and its pair. Every
// expert id must be in [0, experts).
struct MoeDispatchParams {
  const int32_t* expert_ids = nullptr;  // [tokens, top_k]
  int64_t tokens = 0, top_k = 0, experts = 0;
  int32_t* row_offsets = nullptr;       // [experts + 1]
  int32_t* pair_of_row = nullptr;       // [tokens * top_k]
  int32_t* row_of_pair = nullptr;       // [tokens * top_k]
};

// The grouped rows' inputs: x_grouped[r] = BF16 (round to nearest even) of x[pair_of_row[r] /
// top_k], what the expert matmul takes. rows = tokens x top_k, every pair's row.
struct MoeGatherParams {
  const float* x = nullptr;             // [tokens, hidden]
  const int32_t* pair_of_row = nullptr; // [rows]
  int64_t rows = 0, top_k = 0, hidden = 0;
  uint16_t* x_grouped = nullptr;        // [rows, hidden] BF16 bits
};

// MoE combine: out[t] = (shared ? shared[t] : 0) + routed_scale * routed[t], where routed[t]
// starts at 0 and adds weights[t, s] * y_grouped[row_of_pair[t * top_k + s]] over the token's
// slots in ascending order of their expert ids (each a float product, then a float sum).
struct MoeCombineParams {
  const float* y_grouped = nullptr;     // [tokens * top_k, hidden]
  const int32_t* row_of_pair = nullptr; // [tokens * top_k]
  const int32_t* expert_ids = nullptr;  // [tokens, top_k]
  const float* weights = nullptr;       // [tokens, top_k]
  const float* shared = nullptr;        // [tokens, hidden] or nullptr
  float routed_scale = 1.0f;
  float* out = nullptr;                 // [tokens, hidden]; may be `shared`
  int64_t tokens = 0, top_k = 0, hidden = 0;
};

// Routed experts' matmul over NVFP4 weights with BF16 activations (W4A16): rows
// [row_offsets[e], row_offsets[e + 1]) of x are the tokens routed to expert e (grouped by
// expert, offsets non-decreasing from 0), and for each such row r
//   y[r, j] = g_e * sum_i x[r, i] * (e2m1(W_e[j, i]) * sf_e[j, i / 16])
// with expert e's weight [n, k] in formats/nvfp4.h's layout at values + e * n * k / 2 (codes,
// two per byte, even i in the low nibble) and scales + e * n * k / 16 (E4M3 block scales), and
// its global scale g_e = global_scales[e]. Each product e2m1 x sf is exact in BF16, each x * w
// exact in FP32; the sum is FP32 (the CPU's in double, rounded once), then times g_e.
struct ExpertGemmParams {
  const uint16_t* x = nullptr;            // [rows, k] BF16 bits
  const int32_t* row_offsets = nullptr;   // [experts + 1]
  const uint8_t* values = nullptr;        // [experts, n, k / 2]
  const uint8_t* scales = nullptr;        // [experts, n, k / 16]
  const float* global_scales = nullptr;   // [experts]
  float* y = nullptr;                     // [rows, n]
  int64_t rows = 0, experts = 0, n = 0, k = 0;
};

// MoE routing: s = sigmoid(logits); the top_k experts by s + bias (bias may be null; ties to the
// lower expert id) are chosen, in descending order of s + bias, with weights s / sum(s chosen).
// forced_ids (the CPU reference only) names each token's top_k distinct experts instead, in any
// order: they are ordered and weighted as a choice of those experts is, so one engine can take
// another's discrete choices and be compared on the arithmetic alone.
struct RouterParams {
  const float* logits = nullptr;  // [tokens, experts], FP32
  const float* bias = nullptr;    // [experts] or nullptr
  int64_t tokens = 0, experts = 0, top_k = 0;
  int32_t* expert_ids = nullptr;  // [tokens, top_k]
  float* weights = nullptr;       // [tokens, top_k]
  const int32_t* forced_ids = nullptr;  // [tokens, top_k] or nullptr
};

}  // namespace fp4
