// The indexer's selection (docs/kernels/indexer.md, "Select"): from the block scores the
// scoring kernels wrote, each (head, token)'s top-k block ids, ascending, ties to the lower id.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/indexer_topk.h"
#include "backend/cuda/indexer_topk_device.cuh"

namespace fp4::cuda::detail {
namespace {

// An unsigned key whose order is the scores' order, with -0 and +0 equal as the CPU's
// comparison has them. Scores are never NaN (the block maximum skips NaN dot products).
__device__ __forceinline__ uint32_t orderable(float s) {
  const uint32_t u = __float_as_uint(s == 0.0f ? 0.0f : s);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The candidates of a (head, token): blocks [lo, hi) of its scores, between the forced prefix
// [0, lo) and suffix [hi, blocks). Both paths write the selection to `out` ascending.
struct Candidates {
  const float* scores;  // the (token, head)'s block scores
  int32_t* out;         // its topk ids
  int blocks, lo, hi;
};

// Up to this many free slots the selection merges each warp's sorted best; past it, the radix
// select runs.
constexpr int kMergedSlots = 32;

// A candidate's rank key: the score's order above, the lower block id breaking ties (the CPU's
// rule), so every candidate has its own key. 0 is below every real key (orderable(-inf) > 0).
__device__ __forceinline__ uint64_t rank_key(float score, int block) {
  return static_cast<uint64_t>(orderable(score)) << 32 | ~static_cast<uint32_t>(block);
}
__device__ __forceinline__ int block_of(uint64_t key) { return static_cast<int>(~static_cast<uint32_t>(key)); }

// A bitonic compare-exchange across lanes: this lane keeps the larger of its key and its
// partner's (lane ^ j) when keep_larger, else the smaller.
__device__ __forceinline__ uint64_t exchange(uint64_t x, int j, bool keep_larger) {
  const uint64_t y = __shfl_xor_sync(0xFFFFFFFFu, x, j);
  return (x < y) == keep_larger ? y : x;
}

// kColumns warp-wide sequences of 32 keys (one a lane each), each sorted descending by lane;
// the columns' networks interleave, so their shuffles overlap.
template <int kColumns>
__device__ __forceinline__ void sort_descending(uint64_t (&c)[4], int lane) {
#pragma unroll
  for (int k = 2; k <= 32; k <<= 1) {
#pragma unroll
    for (int j = k / 2; j > 0; j /= 2) {
      // The lower lane of a pair keeps the larger key where its run of k goes down.
      const bool keep_larger = ((lane & j) == 0) == ((lane & k) == 0);
#pragma unroll
      for (int e = 0; e < kColumns; ++e) c[e] = exchange(c[e], j, keep_larger);
    }
  }
}

// The 32 largest of two descending columns, descending: against b reversed, the larger of each
// lane's pair form a bitonic sequence holding them, which five exchanges sort.
__device__ __forceinline__ uint64_t merge_best(uint64_t a, uint64_t b, int lane) {
  const uint64_t r = __shfl_sync(0xFFFFFFFFu, b, 31 - lane);
  uint64_t x = a > r ? a : r;
#pragma unroll
  for (int j = 16; j > 0; j /= 2) x = exchange(x, j, (lane & j) == 0);
  return x;
}

template <int kColumns>
__device__ __forceinline__ uint64_t best_of_columns(uint64_t (&c)[4], int lane) {
  sort_descending<kColumns>(c, lane);
  if constexpr (kColumns >= 2) {
    c[0] = merge_best(c[0], c[1], lane);
    if constexpr (kColumns == 4) c[0] = merge_best(c[0], merge_best(c[2], c[3], lane), lane);
  }
  return c[0];
}

// Few free slots (M3's top-16 leaves 13 to 15 beside the forced blocks): every warp sorts
// 32-key columns of candidates by bitonic networks of shuffles and keeps its 32 best, then the
// warps' lists merge four at a time through shared memory, and warp 0 writes the `free_slots`
// best ids ascending between the forced blocks. No histogram and no atomics: the whole select
// is a few barriers and chains of shuffles.
template <int kThreads>
__device__ __forceinline__ void merge_select(const Candidates& c, int free_slots) {
  constexpr int kCtaWarps = kThreads / 32;
  __shared__ uint64_t lists[2][kCtaWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n = c.hi - c.lo;
  for (int i = threadIdx.x; i < c.lo; i += kThreads) c.out[i] = i;
  for (int i = threadIdx.x; i < c.blocks - c.hi; i += kThreads) c.out[c.lo + free_slots + i] = c.hi + i;
  if (free_slots == 0) return;  // the whole CTA: no barrier follows
  // Rounds of 4 kThreads candidates; in a round, column e of warp w is candidates
  // [e kThreads + 32 w, + 32), so short lists spread over every warp.
  uint64_t best = 0;
  for (int base = 0; base < n; base += 4 * kThreads) {
    uint64_t col[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = base + e * kThreads + warp * 32 + lane;
      col[e] = i < n ? rank_key(__ldg(c.scores + c.lo + i), c.lo + i) : 0;
    }
    const int columns = (n - base - warp * 32 + kThreads - 1) / kThreads;  // live ones, warp-uniform
    uint64_t round;
    if (columns >= 3) round = best_of_columns<4>(col, lane);
    else if (columns == 2) round = best_of_columns<2>(col, lane);
    else if (columns == 1) round = best_of_columns<1>(col, lane);
    else break;
    best = base == 0 ? round : merge_best(best, round, lane);
  }
  lists[0][warp][lane] = best;
  int lists_left = kCtaWarps, from = 0;
#pragma unroll 1
  while (true) {
    __syncthreads();
    const int groups = (lists_left + 3) / 4;
    if (warp < groups) {
      uint64_t col[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) col[e] = 4 * warp + e < lists_left ? lists[from][4 * warp + e][lane] : 0;
      best = merge_best(merge_best(col[0], col[1], lane), merge_best(col[2], col[3], lane), lane);
      if (groups > 1) lists[from ^ 1][warp][lane] = best;
    }
    if (groups == 1) break;
    lists_left = groups;
    from ^= 1;
  }
  if (warp != 0) return;
  // Lanes below free_slots hold the winners; each one's place is the count of winners of lower id.
  const int block = block_of(best);
  int rank = 0;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int other = __shfl_sync(0xFFFFFFFFu, block, j);
    rank += j < free_slots && other < block;
  }
  if (lane < free_slots) c.out[c.lo + rank] = block;
}

// Many free slots: a radix select, 8 bits a pass from the top over a shared histogram, finds T,
// the r-th largest candidate key, and how many candidates equal to T to take: the ones of
// lowest id, the CPU's tie rule. The selection is then written already ascending, each warp a
// contiguous span of the blocks: a first walk over the spans counts what each warp takes, so
// after one barrier every warp knows where its outputs start (ranks within a warp are ballots).
template <int kThreads>
__device__ __forceinline__ void radix_select(const Candidates& c, int free_slots) {
  constexpr int kCtaWarps = kThreads / 32;
  constexpr int kBins = 256, kLoads = 4;
  // The candidates' keys, when they fit (up to 512K tokens of 128-token pages): read from
  // global memory once instead of on every pass.
  constexpr int kCached = 4096;
  __shared__ uint32_t keys_s[kCached];
  __shared__ uint32_t histogram[kBins];
  __shared__ uint32_t found[3];  // digit, candidates above it, candidates equal to it
  const float* scores = c.scores;
  int32_t* out = c.out;
  const int blocks = c.blocks, lo = c.lo, hi = c.hi, n = hi - lo;
  const bool cached = n <= kCached;
  if (cached) {
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += kThreads) keys_s[i] = orderable(__ldg(scores + lo + i));
    __syncthreads();
  }
  auto key_of = [&](int i) { return cached ? keys_s[i] : orderable(__ldg(scores + lo + i)); };  // candidate i = block lo + i
  uint32_t threshold = 0xFFFFFFFFu;  // above every key: no candidate, when no slot is free
  int remaining = free_slots;
  uint32_t equal_to_threshold = 0;
  if (remaining > 0) {
    uint32_t prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int d = threadIdx.x; d < kBins; d += kThreads) histogram[d] = 0;
      __syncthreads();
      // Uncached, kLoads independent loads in flight a thread: the passes are bound by latency.
      for (int i = threadIdx.x; i < n; i += kLoads * kThreads) {
        uint32_t u[kLoads];
#pragma unroll
        for (int k = 0; k < kLoads; ++k) u[k] = i + k * kThreads < n ? key_of(i + k * kThreads) : 0u;
#pragma unroll
        for (int k = 0; k < kLoads; ++k) {
          if (i + k * kThreads < n && (u[k] & mask) == prefix) atomicAdd(&histogram[(u[k] >> shift) & (kBins - 1)], 1u);
        }
      }
      __syncthreads();
      // Warp 0: lane l sums bins [8l, 8l + 8), the lanes above it the higher bins; the one lane
      // whose bin d has fewer than `remaining` candidates above it and enough at or above it
      // names the digit.
      if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        uint32_t bins[kBins / 32], mine = 0;
#pragma unroll
        for (int i = 0; i < kBins / 32; ++i) mine += bins[i] = histogram[lane * (kBins / 32) + i];
        uint32_t at_or_above = mine;  // bins [8 lane, 256)
#pragma unroll
        for (int offset = 1; offset < 32; offset <<= 1) {
          const uint32_t v = __shfl_down_sync(0xFFFFFFFFu, at_or_above, offset);
          if (lane + offset < 32) at_or_above += v;
        }
        uint32_t above = at_or_above - mine;  // bins past this lane's
#pragma unroll
        for (int i = kBins / 32 - 1; i >= 0; --i) {
          if (above < static_cast<uint32_t>(remaining) && static_cast<uint32_t>(remaining) <= above + bins[i]) {
            found[0] = lane * (kBins / 32) + i;
            found[1] = above;
            found[2] = bins[i];
          }
          above += bins[i];
        }
      }
      __syncthreads();
      const uint32_t digit = found[0];
      remaining -= static_cast<int>(found[1]);
      equal_to_threshold = found[2];
      prefix |= digit << shift;
      mask |= static_cast<uint32_t>(kBins - 1) << shift;
      __syncthreads();  // found is read by every thread before the next pass writes it
    }
    threshold = prefix;  // take every candidate above it and `remaining` equal to it
  }
  // Usually every candidate equal to T is taken (no tie at the boundary); otherwise `ties` of
  // them, those of lowest id.
  const bool take_all_equal = remaining > 0 && static_cast<uint32_t>(remaining) == equal_to_threshold;
  const int ties = remaining > 0 && !take_all_equal ? remaining : 0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // Warp w's span of blocks: [w span, (w + 1) span), whole 32-block rounds.
  const int span = (blocks + 32 * kCtaWarps - 1) / (32 * kCtaWarps) * 32;
  const int first = warp * span, last = min(first + span, blocks);
  auto classify = [&](int b, bool& sure, bool& equal) {
    const bool forced = b < lo || b >= hi;
    const uint32_t u = b < blocks && !forced ? key_of(b - lo) : 0u;
    sure = b < blocks && (forced || u > threshold || (take_all_equal && u == threshold));
    equal = ties > 0 && b < blocks && !forced && u == threshold;
  };
  uint32_t sure_count = 0, equal_count = 0;
  for (int b0 = first; b0 < last; b0 += 32) {
    bool sure, equal;
    classify(b0 + lane, sure, equal);
    sure_count += __popc(__ballot_sync(0xFFFFFFFFu, sure));
    equal_count += __popc(__ballot_sync(0xFFFFFFFFu, equal));
  }
  __shared__ uint2 warp_outputs[kCtaWarps];
  if (lane == 0) warp_outputs[warp] = make_uint2(sure_count, equal_count);
  __syncthreads();
  // Where this warp's outputs start, and how many equal keys the warps before it hold.
  int written = 0, equal_seen = 0;
  for (int w = 0; w < warp; ++w) {
    const uint2 c = warp_outputs[w];
    written += static_cast<int>(c.x) + min(static_cast<int>(c.y), max(ties - equal_seen, 0));
    equal_seen += static_cast<int>(c.y);
  }
  const uint32_t below = (1u << lane) - 1u;
  for (int b0 = first; b0 < last; b0 += 32) {
    bool sure, equal;
    classify(b0 + lane, sure, equal);
    const uint32_t equals = __ballot_sync(0xFFFFFFFFu, equal);
    const bool take = sure || (equal && equal_seen + __popc(equals & below) < ties);
    const uint32_t takes = __ballot_sync(0xFFFFFFFFu, take);
    if (take) out[written + __popc(takes & below)] = b0 + lane;
    written += __popc(takes);
    equal_seen += __popc(equals);
  }
}

// One CTA per (head, token).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) indexer_select_kernel(IndexerArgs a) {
  // A programmatic dependent that follows (the next call's scoring kernel, where indexer calls
  // run back to back) may start its page prefetch while this kernel runs.
  allow_dependent_launch();
  const int64_t pair = blockIdx.x, h = pair / a.tokens, t = pair % a.tokens;
  int32_t* out = a.selected + pair * a.topk;  // (h * tokens + t) * topk
  const int64_t visible = visible_blocks(a, t);
  if (visible <= a.topk) {
    for (int i = threadIdx.x; i < a.topk; i += kThreads) out[i] = i < visible ? i : -1;
    // No scores needed; the wait only keeps this grid from finishing before the scoring one, so
    // that the stream's next kernel finds both done.
    wait_for_prerequisite_grid();
    return;  // the whole CTA: no barrier follows
  }
  wait_for_prerequisite_grid();  // the scoring kernel's scores
  // visible > topk >= init + local, so the candidates [lo, hi) outnumber the free slots.
  // Block ids fit an int: the selection holds them as int32.
  const int blocks = static_cast<int>(visible);
  const Candidates c{a.scores + (t * a.heads + h) * a.max_blocks, out, blocks, a.init_blocks, blocks - a.local_blocks};
  const int free_slots = a.topk - a.init_blocks - a.local_blocks;
  if (free_slots <= kMergedSlots && !a.radix_select) merge_select<kThreads>(c, free_slots);
  else radix_select<kThreads>(c, free_slots);
}

}  // namespace

// A programmatic dependent of the scoring kernel: its launch, and the outputs of its CTAs whose
// tokens see topk blocks or fewer (no scores needed), overlap the scoring's last CTAs. Every CTA
// waits for the scoring kernel before it exits.
cudaError_t launch_indexer_select(const IndexerArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.tokens * a.heads));
  // Past kWideSelectBlocks a wider CTA is faster (each thread counts half the keys a pass), below
  // it a narrower one (its barriers are cheaper); by max_blocks, so the launch stays shape-only.
  if (a.max_blocks > kWideSelectBlocks)
    return launch_dependent(indexer_select_kernel<2 * kSelectThreads>, grid, dim3(2 * kSelectThreads), 0, stream, a);
  return launch_dependent(indexer_select_kernel<kSelectThreads>, grid, dim3(kSelectThreads), 0, stream, a);
}

}  // namespace fp4::cuda::detail
