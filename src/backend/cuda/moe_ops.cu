// MoE dispatch, gather and combine kernels. Dispatch is deterministic and stable without atomics:
// CTA e counts expert e's pairs, then finds its first row from the lower experts' counts and
// walks the pairs in order, ranking its own with warp ballots. Combine sums a token's slots in
// ascending expert order, one float product and one float sum at a time (-fmad=false), as the
// CPU reference does.
#include <cuda_runtime.h>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/moe_ops.h"
#include "formats/minifloat.h"

namespace fp4::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Sum of `x` over the CTA (every thread gets it). `scratch` holds kWarps ints.
__device__ __forceinline__ int block_sum(int x, int* scratch) {
  for (int d = 16; d > 0; d /= 2) x += __shfl_xor_sync(0xffffffffu, x, d);
  __syncthreads();  // scratch is free
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  int total = 0;
  for (int w = 0; w < kWarps; ++w) total += scratch[w];
  return total;
}

// Grid: experts. Counting every expert below e repeats work per CTA (experts x pairs reads in
// all), which at decode and chunked-prefill sizes stays in L2 and well under the matmuls.
__global__ void __launch_bounds__(kThreads) dispatch_kernel(const MoeDispatchParams p) {
  __shared__ int scratch[kWarps];
  __shared__ int warp_counts[kWarps];
  const int e = blockIdx.x, pairs = static_cast<int>(p.tokens * p.top_k);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Counts of experts 0 .. e, one pass: each pair below e adds to `before`, equal to e to `own`.
  int before = 0, own = 0;
  for (int i = threadIdx.x; i < pairs; i += kThreads) {
    const int id = p.expert_ids[i];
    before += id >= 0 && id < e;
    own += id == e;
  }
  const int first = block_sum(before, scratch);
  const int count = block_sum(own, scratch);
  if (threadIdx.x == 0) {
    if (e == 0) p.row_offsets[0] = 0;
    p.row_offsets[e + 1] = first + count;
  }
  if (e == 0) {  // rows past the valid pairs (ids out of range) map to no pair
    int valid = 0;
    for (int i = threadIdx.x; i < pairs; i += kThreads) valid += p.expert_ids[i] >= 0 && p.expert_ids[i] < p.experts;
    valid = block_sum(valid, scratch);
    for (int r = valid + threadIdx.x; r < pairs; r += kThreads) p.pair_of_row[r] = -1;
  }
  // Stable placement: chunk by chunk, a pair's rank is the number of earlier matches.
  int base = first;
  for (int chunk = 0; chunk < pairs; chunk += kThreads) {
    const int i = chunk + threadIdx.x;
    const int id = i < pairs ? p.expert_ids[i] : -1;
    const bool match = id == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    __syncthreads();  // warp_counts of the previous chunk are read
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int rank = base + __popc(ballot & ((1u << lane) - 1));
    for (int w = 0; w < warp; ++w) rank += warp_counts[w];
    if (match) {
      p.pair_of_row[rank] = i;
      p.row_of_pair[i] = rank;
    }
    if (e == 0 && i < pairs && (id < 0 || id >= p.experts)) p.row_of_pair[i] = -1;  // placed nowhere
    for (int w = 0; w < kWarps; ++w) base += warp_counts[w];
  }
}

// Grid: rows; threads over hidden. A row that maps to no pair (dispatch saw an id out of range)
// becomes NaN.
__global__ void __launch_bounds__(kThreads) gather_kernel(const MoeGatherParams p) {
  allow_dependent_launch();  // the experts' matmul that follows waits for the rows itself
  const int64_t r = blockIdx.x;
  const int pair = p.pair_of_row[r];
  uint16_t* dst = p.x_grouped + r * p.hidden;
  if (pair < 0 || pair >= p.rows) {
    for (int64_t j = threadIdx.x; j < p.hidden; j += kThreads) dst[j] = 0x7FC0;
    return;
  }
  // kGatherBatch loads a thread before its stores, which the compiler would otherwise keep in
  // order behind each store (dst may alias src as far as it knows).
  constexpr int kGatherBatch = 8;
  const float* src = p.x + (pair / p.top_k) * p.hidden;
  for (int64_t base = threadIdx.x; base < p.hidden; base += kGatherBatch * kThreads) {
    float v[kGatherBatch];
#pragma unroll
    for (int b = 0; b < kGatherBatch; ++b) {
      const int64_t j = base + b * kThreads;
      v[b] = j < p.hidden ? src[j] : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kGatherBatch; ++b) {
      const int64_t j = base + b * kThreads;
      if (j < p.hidden) dst[j] = bf16_encode(v[b]);
    }
  }
}

// Grid: (tokens, column slices of kCombineColumns); threads over the slice's columns. Every
// thread sorts the token's (at most 16) slots by expert id alike, then holds each sorted slot's
// row pointer and weight in registers, so a column's loads depend on nothing but its own
// address: at one token the slices spread the work over SMs, and a thread's columns are all
// loaded before any is stored (the output may alias `shared`, so a store would otherwise keep
// the next column's loads behind it).
constexpr int kCombineColumnsPerThread = 4;
constexpr int kCombineColumns = kCombineColumnsPerThread * kThreads;

__global__ void __launch_bounds__(kThreads) combine_kernel(const MoeCombineParams p) {
  const int64_t t = blockIdx.x;
  const int k = static_cast<int>(p.top_k);
  const int64_t pairs = p.tokens * p.top_k;
  int id[kMaxCombineSlots];
  int slot[kMaxCombineSlots];
  bool bad = false;
#pragma unroll
  for (int s = 0; s < kMaxCombineSlots; ++s) {
    slot[s] = s;
    id[s] = s < k ? p.expert_ids[t * k + s] : 0;
  }
  for (int s = 1; s < k; ++s) {  // insertion sort: ascending id, then slot (stable)
    const int cur = slot[s], cur_id = id[s];
    int j = s - 1;
    while (j >= 0 && id[j] > cur_id) {
      slot[j + 1] = slot[j];
      id[j + 1] = id[j];
      --j;
    }
    slot[j + 1] = cur;
    id[j + 1] = cur_id;
  }
  const float* rows[kMaxCombineSlots];
  float weight[kMaxCombineSlots];
#pragma unroll
  for (int s = 0; s < kMaxCombineSlots; ++s) {
    rows[s] = p.y_grouped;
    weight[s] = 0.0f;
    if (s < k) {
      const int row = p.row_of_pair[t * k + slot[s]];
      bad |= row < 0 || row >= pairs;
      rows[s] = p.y_grouped + int64_t{row} * p.hidden;
      weight[s] = p.weights[t * k + slot[s]];
    }
  }
  float* out = p.out + t * p.hidden;
  const float* shared = p.shared != nullptr ? p.shared + t * p.hidden : nullptr;
  const int64_t first = int64_t{blockIdx.y} * kCombineColumns + threadIdx.x;
  if (bad) {
#pragma unroll
    for (int c = 0; c < kCombineColumnsPerThread; ++c) {
      const int64_t j = first + c * kThreads;
      if (j < p.hidden) out[j] = __int_as_float(0x7fc00000);
    }
    return;
  }
  float result[kCombineColumnsPerThread];
#pragma unroll
  for (int c = 0; c < kCombineColumnsPerThread; ++c) {
    const int64_t j = first + c * kThreads;
    if (j >= p.hidden) continue;
    float routed = 0.0f;  // the CPU's order: ascending expert id, one product and one sum each
#pragma unroll
    for (int s = 0; s < kMaxCombineSlots; ++s)
      if (s < k) routed += weight[s] * rows[s][j];
    const float base = shared != nullptr ? shared[j] : 0.0f;
    result[c] = base + p.routed_scale * routed;
  }
#pragma unroll
  for (int c = 0; c < kCombineColumnsPerThread; ++c) {
    const int64_t j = first + c * kThreads;
    if (j < p.hidden) out[j] = result[c];
  }
}

}  // namespace

cudaError_t launch_moe_dispatch(const MoeDispatchParams& p, cudaStream_t stream) {
  dispatch_kernel<<<static_cast<unsigned>(p.experts), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_moe_gather(const MoeGatherParams& p, cudaStream_t stream) {
  gather_kernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.tokens),
                  static_cast<unsigned>((p.hidden + kCombineColumns - 1) / kCombineColumns));
  combine_kernel<<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
