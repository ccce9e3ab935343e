// The tensor-core scoring kernels' page streaming (indexer_score_mma.cu, indexer_score_fp8.cu):
// each warp owns whole pages of its CTA's blocks and streams them in 32-key chunks through its
// own ring in shared memory (docs/kernels/indexer.md, "Tensor-core scores").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/indexer_topk.h"
#include "backend/cuda/indexer_topk_device.cuh"
#include "backend/cuda/mma.cuh"
#include "kvcache/page_layout.h"

namespace fp4::cuda::detail {

constexpr int kWarps = kScoreThreads / 32;

// A chunk: kKeys consecutive key rows of one page in shared memory, codes [kKeys][kStride]
// then the NVFP4 block scales [kKeys][kScaleBytes]. Each warp streams its own pages through
// its own ring of kStages chunks, so the CTA never waits at a barrier inside the page loop.
template <kvcache::PageDType D, int kDim, int kRowStride>
struct Chunk {
  static constexpr int kRowBytes = static_cast<int>(kvcache::page_code_bytes(D, kDim));
  static constexpr int kStride = kRowStride;
  static constexpr int kKeys = 32;
  static constexpr int kScaleBytes = D == kvcache::PageDType::kNVFP4 ? kDim / 16 : 0;
  static constexpr int kScalesAt = kKeys * kStride;
  static constexpr int kBytes = kScalesAt + kKeys * kScaleBytes;
  static constexpr int kUnitsPerRow = kRowBytes / 16;  // 16-byte copies
  static_assert(32 % kUnitsPerRow == 0 || kUnitsPerRow == 32, "a warp's copy round covers whole rows");
  // BF16 chunks are 10 KiB (at head_dim 128) and the bytes, not the instructions, bound them.
  static constexpr int kStages = D == kvcache::PageDType::kBF16 ? 2 : 3;
  static_assert(kRowBytes % 16 == 0 && kStride % 16 == 0 && kStride >= kRowBytes, "rows of whole 16-byte copies");
  static_assert(kScalesAt % 16 == 0 && kBytes % 16 == 0, "16-byte aligned regions");
};

template <int kBytes>
__device__ __forceinline__ void cp_async_small(void* dst, const void* src) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async sizes");
  if constexpr (kBytes == 16) cp_async16(dst, src);
  else if constexpr (kBytes == 8) tc::cp_async8(dst, src);
  else tc::cp_async4(dst, src);
}

// One warp's pages of the CTA's blocks (first + warp, then every kWarps-th), chunk by chunk:
// kStages - 1 chunks in flight while one is scored. A chunk's rows past the visible keys are
// copies of its last visible row, which leave every block maximum as it is (no masking). The
// copy cursor reads each page's block-table entry one page ahead, so that finishing a page
// never waits on a load; a page outside the pool has no chunks, and its block is written as
// -inf as the cursor passes it. Each chunk in flight carries a tag (kMore, or its block when
// it is its page's last), so the scoring loop needs no block table either. Every call is
// warp-uniform.
template <kvcache::PageDType D, int kDim, int kRowStride>
struct WarpChunks {
  using C = Chunk<D, kDim, kRowStride>;
  static constexpr int kU = C::kUnitsPerRow;
  static constexpr int kMore = -1, kNone = -2;  // tags: a page's chunk before its last; past the end
  const IndexerArgs& a;
  uint8_t* ring;             // this warp's kStages chunks
  const int32_t* table;      // the sequence's block-table row
  float* scores;             // the token's [heads, max_blocks]
  int64_t pos;
  int end, lane;
  // The next chunk to copy: its block, this lane's first code unit and scale row, and how many
  // keys of the page are left from there; the entry of the warp's block after it.
  int issue_block;
  int next_entry = -1;
  const uint8_t* issue_codes = nullptr;
  const uint8_t* issue_scales = nullptr;
  int issue_keys = 0, issue_slot = 0;
  int tags[C::kStages - 1];  // of the chunks in flight, oldest first

  // From issue_block on (entry: its block-table entry), the first block whose page is in the
  // pool becomes the copy cursor's.
  __device__ void find_page(int entry) {
    for (; issue_block < end; issue_block += kWarps) {
      const int following = issue_block + kWarps;
      next_entry = following < end ? table[following] : -1;  // waited on one page later
      if (entry >= 0 && entry < a.num_pages) {
        const uint8_t* p = a.pool + entry * a.page_bytes;
        issue_codes = p + a.codes_offset + 16 * lane;
        issue_scales = p + a.scales_offset + lane * C::kScaleBytes;
        issue_keys = block_keys(a, pos, issue_block);
        return;
      }
      if (lane < a.heads) scores[lane * a.max_blocks + issue_block] = __int_as_float(0xFF800000);
      entry = next_entry;
    }
  }
  // The chunk's rows into a slot. Copy i of a lane is 16-byte unit lane + 32 i of the chunk's
  // codes: a warp's copy covers 512 contiguous bytes, and in a full chunk (the common case)
  // every address is a lane base plus a constant.
  __device__ void copy(uint8_t* dst) const {
    uint8_t* lane_dst = dst + lane / kU * C::kStride + 16 * (lane % kU);
    uint8_t* scale_dst = dst + C::kScalesAt + lane * C::kScaleBytes;
    if (issue_keys >= C::kKeys) {
#pragma unroll
      for (int i = 0; i < kU; ++i) cp_async16(lane_dst + 32 / kU * i * C::kStride, issue_codes + 512 * i);
      if constexpr (C::kScaleBytes > 0) cp_async_small<C::kScaleBytes>(scale_dst, issue_scales);
    } else {
      const uint8_t* lane_codes = issue_codes - 16 * (lane - lane % kU);  // this lane's part of row 0
#pragma unroll
      for (int i = 0; i < kU; ++i) {
        const int row = (lane + 32 * i) / kU, from = row < issue_keys ? row : issue_keys - 1;
        cp_async16(lane_dst + 32 / kU * i * C::kStride, lane_codes + from * C::kRowBytes);
      }
      if constexpr (C::kScaleBytes > 0) {
        const int from = lane < issue_keys ? lane : issue_keys - 1;
        cp_async_small<C::kScaleBytes>(scale_dst, issue_scales + (from - lane) * C::kScaleBytes);
      }
    }
  }
  // Copies the cursor's chunk (if any) into the next slot and returns its tag.
  __device__ int issue() {
    int tag = kNone;
    if (issue_block < end) {
      copy(ring + issue_slot * C::kBytes);
      issue_keys -= C::kKeys;
      if (issue_keys > 0) {
        issue_codes += C::kKeys * C::kRowBytes;
        issue_scales += C::kKeys * C::kScaleBytes;
        tag = kMore;
      } else {
        tag = issue_block;
        issue_block += kWarps;
        find_page(next_entry);
      }
    }
    cp_async_commit();  // one group per chunk, empty ones included, so the counts below hold
    issue_slot = issue_slot + 1 == C::kStages ? 0 : issue_slot + 1;
    return tag;
  }
  __device__ void start(int first) {
    issue_block = first;
    find_page(first < end ? table[first] : -1);
#pragma unroll
    for (int k = 0; k + 1 < C::kStages; ++k) tags[k] = issue();
  }
  // The tag of the next chunk in the warp's order: kNone once the warp's pages are done.
  __device__ int next_tag() const { return tags[0]; }
  // That chunk, after refilling the slot of the one before it.
  __device__ const uint8_t* next() {
    __syncwarp();  // every lane is done reading the slot issue() refills
#pragma unroll
    for (int k = 0; k + 2 < C::kStages; ++k) tags[k] = tags[k + 1];
    tags[C::kStages - 2] = issue();
    cp_async_wait<C::kStages - 1>();
    __syncwarp();  // every lane's copies of this chunk have landed
    // The slots go round in order, so the oldest chunk sits in the slot issue() fills next.
    const uint8_t* here = ring + issue_slot * C::kBytes;
    return here;
  }
};

// Run before the kernel waits for the one before it (a programmatic dependent launch): asks the
// L2 for this warp's first chunks, the ones its stream copies first, so that their DRAM round
// trip overlaps the end of the kernel before. It reads only the token's position, sequence and
// block-table entry, which the step's host uploads set before any of its kernels runs, and
// writes nothing. A prefetch brings no data into the SM, so a page row that the kernel before
// is still writing (the newest token's) is copied afresh after the wait.
template <kvcache::PageDType D, int kDim, int kRowStride>
__device__ __forceinline__ void prefetch_first_chunks(const IndexerArgs& a, int64_t t, int lane) {
  using C = Chunk<D, kDim, kRowStride>;
  constexpr int kLine = 128;
  const BlockRange range = split_range(a, t);
  const int64_t block = range.first + threadIdx.x / 32;
  if (block >= range.end) return;
  const int32_t entry = a.block_tables[a.seq_of_token[t] * a.max_blocks + block];
  if (entry < 0 || entry >= a.num_pages) return;
  const int keys = min(block_keys(a, a.positions[t], block), (C::kStages - 1) * C::kKeys);
  const uint8_t* page = a.pool + entry * a.page_bytes;
  for (int at = lane * kLine; at < keys * C::kRowBytes; at += 32 * kLine) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(page + a.codes_offset + at));
  }
  for (int at = lane * kLine; at < keys * C::kScaleBytes; at += 32 * kLine) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(page + a.scales_offset + at));
  }
}

// This warp's stream of token t's blocks in the CTA's split (`rings`: the CTA's chunk rings),
// its first chunks in flight; the split's blocks past the visible ones get -inf in `scores`.
template <kvcache::PageDType D, int kDim, int kRowStride>
__device__ __forceinline__ WarpChunks<D, kDim, kRowStride> start_warp_chunks(const IndexerArgs& a, uint8_t* rings,
                                                                             int64_t t, float* scores, int lane) {
  using C = Chunk<D, kDim, kRowStride>;
  const int warp = threadIdx.x / 32;
  const BlockRange range = split_blocks(a, t, scores);
  WarpChunks<D, kDim, kRowStride> stream{a, rings + warp * C::kStages * C::kBytes,
                                         a.block_tables + a.seq_of_token[t] * a.max_blocks,
                                         scores, a.positions[t], static_cast<int>(range.end), lane};
  stream.start(static_cast<int>(range.first) + warp);
  return stream;
}

// A 16-key tile's accumulators folded into a thread's running block maximum: the thread holds
// one head's hi and lo columns for rows group and group + 8, added before the maximum. fmaxf
// skips a NaN dot product (a NaN key or query), as the CPU's std::max(best, dot) does.
__device__ __forceinline__ float fold_tile(float best, const float acc[4]) {
  return fmaxf(best, fmaxf(acc[0] + acc[1], acc[2] + acc[3]));
}

// The page's maximum of the head a thread holds (c = lane % 4), over the warp's 8 row groups:
// lanes 0 to 3 hold it for heads c of the pass.
__device__ __forceinline__ float page_max(float best) {
#pragma unroll
  for (int offset = 4; offset < 32; offset <<= 1) best = fmaxf(best, __shfl_xor_sync(0xFFFFFFFFu, best, offset));
  return best;
}

}  // namespace fp4::cuda::detail
