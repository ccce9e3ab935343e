// The sampling kernel's shapes, shared-memory layout and block-wide primitives (reductions,
// scans, exact 64-bit sums from 32-bit atomics), apart from the algorithm in sampler.cu, the one
// file that includes this.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/sample_params.h"

namespace fp4::cuda::detail {
namespace {

using u64 = unsigned long long;  // the type of the shared-memory atomics and shuffles

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kTop = kMaxSampleLogprobs;
// Coarse bins (find_cut), and the candidate list of one bin, which reuses their words.
constexpr int kBins = 2048;
// The ordered scans (the draw) work in tiles of kTile consecutive ids; 2^23 / kTile tiles at most.
constexpr int kItems = 8;
constexpr int kTile = kThreads * kItems;
constexpr int kMaxTiles = (1 << 23) / kTile;
// Banned tokens are marked in the scratch row by a signalling-NaN pattern: -inf for the filters,
// and the logprob passes can tell them apart from a token that penalties pushed to -inf.
constexpr uint32_t kBannedBits = 0x7FBADBADu;

struct Shared {
  union {
    uint32_t words[2 * kBins];               // a 64-bit histogram: low words, then high (add_u64)
    u64 cand[kBins];                         // one bin's tokens as pack(key, id)
    u64 merge[kWarps * kMaxSampleLogprobs];  // the warps' top-logprob lists
  } h;
  uint32_t first_id[kBins];   // radix fallback: the lowest id under each digit
  uint32_t tile_lo[kMaxTiles], tile_hi[kMaxTiles];
  u64 red[kWarps + 1];
  double red_d[kWarps + 1];
  uint32_t count;
  int pick_bin, pick_tile, pick_id;
  u64 pick_above, pick_at, pick_before, pick_cand;
};

__device__ __forceinline__ int lane_id() { return threadIdx.x % 32; }
__device__ __forceinline__ int warp_id() { return threadIdx.x / 32; }

// Monotone in x, with -0 and +0 one key as the host's float comparisons have them.
__device__ __forceinline__ uint32_t order_key(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u << 1) == 0) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}
// (key descending, id ascending) as one number to maximise.
__device__ __forceinline__ u64 pack(uint32_t key, int id) {
  return (u64{key} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ int packed_id(u64 v) { return static_cast<int>(0xFFFFFFFFu - static_cast<uint32_t>(v)); }

// From a scratch value s: x (banned: -inf), and the raw logit l as the host sees the row (banned
// ids at -inf).
__device__ __forceinline__ float as_x(float s) { return isnan(s) ? -INFINITY : s; }
__device__ __forceinline__ float as_raw(float s, float l) { return __float_as_uint(s) == kBannedBits ? -INFINITY : l; }
__device__ __forceinline__ float load_x(const float* xs, int i) { return as_x(xs[i]); }
__device__ __forceinline__ float load_raw(const float* logits, const float* xs, int i) {
  return as_raw(xs[i], logits[i]);
}

// fn(i, s) for every id of the row, s its scratch value, thread-strided. Four loads are issued
// before any is used: one block per row is bound by the latency of its loads, so each thread
// keeps more bytes in flight. for_each_pair also passes the raw logit l.
template <typename Fn>
__device__ __forceinline__ void for_each(const float* xs, int vocab, Fn fn) {
  int i = threadIdx.x;
  for (; i + 3 * kThreads < vocab; i += 4 * kThreads) {
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = xs[i + j * kThreads];
#pragma unroll
    for (int j = 0; j < 4; ++j) fn(i + j * kThreads, v[j]);
  }
  for (; i < vocab; i += kThreads) fn(i, xs[i]);
}
template <typename Fn>
__device__ __forceinline__ void for_each_pair(const float* xs, const float* logits, int vocab, Fn fn) {
  int i = threadIdx.x;
  for (; i + 3 * kThreads < vocab; i += 4 * kThreads) {
    float v[4], l[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = xs[i + j * kThreads];
      l[j] = __ldg(logits + i + j * kThreads);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) fn(i + j * kThreads, v[j], l[j]);
  }
  for (; i < vocab; i += kThreads) fn(i, xs[i], __ldg(logits + i));
}

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ u64 operator()(u64 a, u64 b) const { return a > b ? a : b; }
};

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// A fixed tree for a fixed block size, so a double sum is the same every run. Every block
// primitive ends on a barrier: its shared slots are free again when it returns.
template <typename T, typename Op>
__device__ T block_reduce(T v, T* red, Op op) {
  v = warp_reduce(v, op);
  if (lane_id() == 0) red[warp_id()] = v;
  __syncthreads();
  if (warp_id() == 0) {
    v = warp_reduce(red[lane_id()], op);
    if (lane_id() == 0) red[kWarps] = v;
  }
  __syncthreads();
  v = red[kWarps];
  __syncthreads();
  return v;
}

// Exclusive prefix sum in thread order; *total gets the sum of all.
__device__ u64 block_exclusive_scan(u64 v, u64* red, u64* total) {
  const int lane = lane_id();
  u64 incl = v;
  for (int o = 1; o < 32; o *= 2) {
    const u64 t = __shfl_up_sync(0xFFFFFFFFu, incl, o);
    if (lane >= o) incl += t;
  }
  if (lane == 31) red[warp_id()] = incl;
  __syncthreads();
  if (warp_id() == 0) {
    const u64 w = red[lane];
    u64 wi = w;
    for (int o = 1; o < 32; o *= 2) {
      const u64 t = __shfl_up_sync(0xFFFFFFFFu, wi, o);
      if (lane >= o) wi += t;
    }
    red[lane] = wi - w;
    if (lane == 31) red[kWarps] = wi;
  }
  __syncthreads();
  const u64 excl = red[warp_id()] + incl - v;
  *total = red[kWarps];
  __syncthreads();
  return excl;
}

// An exact 64-bit sum in shared memory from native 32-bit atomics: a 64-bit atomicAdd there is a
// compare-and-swap loop, which contention on one bin slows by orders of magnitude. The adder that
// wraps the low word carries into the high word; the atomics serialise, so exactly one does.
__device__ __forceinline__ void add_u64(uint32_t* lo, uint32_t* hi, u64 v) {
  const uint32_t l = static_cast<uint32_t>(v);
  uint32_t h = static_cast<uint32_t>(v >> 32);
  if (l != 0 && atomicAdd(lo, l) + l < l) ++h;
  if (h != 0) atomicAdd(hi, h);
}
__device__ __forceinline__ u64 word(const uint32_t* lo, const uint32_t* hi, int i) {
  return (u64{hi[i]} << 32) | lo[i];
}

}  // namespace
}  // namespace fp4::cuda::detail
