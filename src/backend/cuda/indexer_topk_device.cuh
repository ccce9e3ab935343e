// What the two scoring kernels of the MSA indexer share (indexer_topk.cu: exact FP32 on CUDA
// cores; indexer_score_mma.cu: tensor cores): a block's page and visible keys, the CTA's range of
// blocks, 16-byte cp.async; and the exact kernel's CTA-wide page staging.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/indexer_topk.h"
#include "formats/e4m3_query.h"
#include "kvcache/page_layout.h"

namespace fp4::cuda::detail {

// The exact kernel's shared-memory image of one page's key rows: codes
// [page_tokens][kCodeStride] (the stride chosen for conflict-free reads), then the NVFP4 block
// scales [page_tokens][kScaleBytes].
template <kvcache::PageDType D, int kDim, int kStride>
struct PageRows {
  static constexpr int kStageBudget = 96 * 1024;
  static constexpr int kCodeBytes = static_cast<int>(kvcache::page_code_bytes(D, kDim));
  static constexpr int kScaleBytes = D == kvcache::PageDType::kNVFP4 ? kDim / 16 : 0;
  static constexpr int kCodeStride = kStride;
  static_assert(kCodeStride >= kCodeBytes, "rows overlap");
  __host__ __device__ static constexpr int scales_at(int page_tokens) { return (page_tokens * kCodeStride + 15) / 16 * 16; }
  __host__ __device__ static constexpr int stage_bytes(int page_tokens) {
    return scales_at(page_tokens) + (page_tokens * kScaleBytes + 15) / 16 * 16;
  }
  // Stages: up to kStageBudget bytes of pages per CTA (at most 4 stages, at least 2), so that
  // small NVFP4 and FP8 pages keep several loads in flight while one is scored; one stage when
  // two would not fit (FP32 rows of 256 values).
  static constexpr int kStages = 2 * stage_bytes(kMaxPageTokens) > 150 * 1024 ? 1
                               : kStageBudget / stage_bytes(kMaxPageTokens) >= 4 ? 4
                               : kStageBudget / stage_bytes(kMaxPageTokens) >= 3 ? 3 : 2;
};

__device__ __forceinline__ void cp_async16(void* smem, const void* global) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory"); }

// Starts copying the rows of keys [0, keys) of a page into a stage, 16 coalesced bytes per
// thread and instruction.
template <typename R>
__device__ __forceinline__ void stage_page(const IndexerArgs& a, const uint8_t* page, int keys, uint8_t* stage) {
  const int code_units = (keys * R::kCodeBytes + 15) / 16;
  for (int u = threadIdx.x; u < code_units; u += kScoreThreads) {
    const int byte = 16 * u;
    const int dst = R::kCodeStride == R::kCodeBytes ? byte : byte / R::kCodeBytes * R::kCodeStride + byte % R::kCodeBytes;
    cp_async16(stage + dst, page + a.codes_offset + byte);
  }
  if constexpr (R::kScaleBytes > 0) {
    uint8_t* scales = stage + R::scales_at(a.page_tokens);
    const int scale_units = (keys * R::kScaleBytes + 15) / 16;
    for (int u = threadIdx.x; u < scale_units; u += kScoreThreads) cp_async16(scales + 16 * u, page + a.scales_offset + 16 * u);
  }
}

// Block b of sequence seq: its page, or nullptr for a page outside the pool (which is not read;
// the kernels score it as an empty block).
__device__ __forceinline__ const uint8_t* block_page(const IndexerArgs& a, int64_t seq, int64_t b) {
  const int64_t p = a.block_tables[seq * a.max_blocks + b];
  return p >= 0 && p < a.num_pages ? a.pool + p * a.page_bytes : nullptr;
}
// The keys of block b that a query at position pos sees (b must be visible: at least 1).
__device__ __forceinline__ int block_keys(const IndexerArgs& a, int64_t pos, int64_t b) {
  const int64_t k = pos + 1 - b * a.page_tokens;
  return static_cast<int>(k < a.page_tokens ? k : a.page_tokens);
}

// A scoring CTA's pages [first, end) of one sequence, streamed through R::kStages stages:
// kStages - 1 pages in flight while one is scored. Every call is CTA-uniform. A page outside
// the pool is not read (the kernels score it as an empty block). The stage of the page being
// scored is tracked as a counter rather than as the 64-bit block index modulo kStages.
template <typename R>
struct PageStream {
  const IndexerArgs& a;
  uint8_t* stages;
  int64_t seq, pos, first, end;
  int stage_bytes;
  int slot = 0;  // the stage of the next page wait() returns

  __device__ const uint8_t* page(int64_t b) const { return block_page(a, seq, b); }
  __device__ int keys(int64_t b) const { return block_keys(a, pos, b); }
  __device__ void issue(int64_t b, int stage) const {
    if (b < end) {
      const uint8_t* p = page(b);
      if (p != nullptr) stage_page<R>(a, p, keys(b), stages + stage * stage_bytes);
    }
    cp_async_commit();  // one group per page, empty ones included, so the counts below hold
  }
  __device__ void start() const {
    for (int k = 0; k + 1 < R::kStages; ++k) issue(first + k, k);
  }
  // Waits until page b is in its stage for the whole CTA and returns that stage, after issuing
  // page b + kStages - 1 into the stage page b - 1 used: every thread must be done reading that
  // one (the kernels end each page with a barrier).
  __device__ const uint8_t* wait(int64_t b) {
    if constexpr (R::kStages > 1) {
      issue(b + R::kStages - 1, slot == 0 ? R::kStages - 1 : slot - 1);
      cp_async_wait<R::kStages - 1>();
    } else {
      issue(b, 0);
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint8_t* here = stages + slot * stage_bytes;
    slot = slot + 1 == R::kStages ? 0 : slot + 1;
    return here;
  }
};

// The FP8 query's shift (formats/e4m3_query.h) of one head's row q[0, dim), computed by a whole
// warp, returned to every lane. fmaxf skips NaN as the CPU's amax does.
__device__ __forceinline__ int warp_query_shift(const float* q, int dim, int lane) {
  float amax = 0.0f;
  for (int e = lane; e < dim; e += 32) amax = fmaxf(amax, fabsf(q[e]));
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  return e4m3_query_shift(amax);
}

__device__ __forceinline__ int query_parts(IndexQueryFormat f) { return f == IndexQueryFormat::kE4M3x2 ? 2 : 1; }

// A query element as the indexer scores it: as given, or its FP8 rounding read back.
__device__ __forceinline__ float scored_query(float x, int shift, IndexQueryFormat f) {
  return f == IndexQueryFormat::kFP32 ? x : e4m3_query_decode(e4m3_query_encode(x, shift, query_parts(f)), shift);
}

// A token's query rows q [heads, dim] as the indexer scores them (the FP8 rounding read back),
// times `scale` (exact: a power of two), into rows [padded_heads, dim] (zeros past `heads`),
// one warp per head.
__device__ __forceinline__ void round_query_rows(const float* q, float* rows, int heads, int padded_heads, int dim,
                                                 IndexQueryFormat f, float scale) {
  const int lane = threadIdx.x % 32;
  for (int h = threadIdx.x / 32; h < padded_heads; h += kScoreThreads / 32) {
    const int shift = h < heads ? warp_query_shift(q + h * dim, dim, lane) : 0;
    for (int e = lane; e < dim; e += 32) rows[h * dim + e] = h < heads ? __fmul_rn(scored_query(q[h * dim + e], shift, f), scale) : 0.0f;
  }
}

__device__ __forceinline__ int64_t visible_blocks(const IndexerArgs& a, int64_t t) {
  const int64_t blocks = a.positions[t] / a.page_tokens + 1;
  return blocks < a.max_blocks ? blocks : a.max_blocks;
}

// The blocks of token t that this CTA scores: [first, end), its split [y, y + 1) *
// blocks_per_split (y = blockIdx.y, ending at split_end) cut at the visible blocks.
struct BlockRange {
  int64_t first, end, split_end;
};
__device__ __forceinline__ BlockRange split_range(const IndexerArgs& a, int64_t t) {
  const int64_t first = static_cast<int64_t>(blockIdx.y) * a.blocks_per_split;
  const int64_t split_end = first + a.blocks_per_split < a.max_blocks ? first + a.blocks_per_split : a.max_blocks;
  const int64_t visible = visible_blocks(a, t);
  return {first, split_end < visible ? split_end : visible, split_end};
}
// The same, the split's blocks past the visible ones given -inf in `scores` (the token's
// [heads, max_blocks]) here, since no page of theirs is scored.
__device__ __forceinline__ BlockRange split_blocks(const IndexerArgs& a, int64_t t, float* scores) {
  const BlockRange r = split_range(a, t);
  for (int64_t b = r.end > r.first ? r.end : r.first; b < r.split_end; ++b) {
    for (int h = threadIdx.x; h < a.heads; h += kScoreThreads) scores[h * a.max_blocks + b] = __int_as_float(0xFF800000);
  }
  return r;
}

template <typename R>
__device__ __forceinline__ PageStream<R> split_pages(const IndexerArgs& a, int64_t t, uint8_t* stages, float* scores) {
  const BlockRange r = split_blocks(a, t, scores);
  return PageStream<R>{a, stages, a.seq_of_token[t], a.positions[t], r.first, r.end, R::stage_bytes(a.page_tokens)};
}

}  // namespace fp4::cuda::detail
