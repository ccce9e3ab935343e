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

// One CTA per (head, token). The forced blocks are a prefix [0, init) and a suffix
// [visible - local, visible); the free slots go to the best of the blocks in between, the
// candidates. A radix select, 8 bits a pass from the top over a shared histogram, finds T, the
// r-th largest candidate key, and how many candidates equal to T to take: the ones of lowest
// id, the CPU's tie rule. The selection is then written already ascending, each warp a
// contiguous span of the blocks: a first walk over the spans counts what each warp takes, so
// after one barrier every warp knows where its outputs start (ranks within a warp are ballots).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) indexer_select_kernel(IndexerArgs a) {
  constexpr int kCtaWarps = kThreads / 32;
  constexpr int kBins = 256, kLoads = 4;
  // The candidates' keys, when they fit (up to 512K tokens of 128-token pages): read from
  // global memory once instead of on every pass.
  constexpr int kCached = 4096;
  __shared__ uint32_t keys_s[kCached];
  __shared__ uint32_t histogram[kBins];
  __shared__ uint32_t found[3];  // digit, candidates above it, candidates equal to it
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
  const float* scores = a.scores + (t * a.heads + h) * a.max_blocks;
  // visible > topk >= init + local, so the candidates [lo, hi) outnumber the free slots.
  // Block ids fit an int: the selection holds them as int32.
  const int blocks = static_cast<int>(visible), lo = a.init_blocks, hi = blocks - a.local_blocks, n = hi - lo;
  const bool cached = n <= kCached;
  if (cached) {
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += kThreads) keys_s[i] = orderable(__ldg(scores + lo + i));
    __syncthreads();
  }
  auto key_of = [&](int i) { return cached ? keys_s[i] : orderable(__ldg(scores + lo + i)); };  // candidate i = block lo + i
  uint32_t threshold = 0xFFFFFFFFu;  // above every key: no candidate, when no slot is free
  int remaining = a.topk - a.init_blocks - a.local_blocks;
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
