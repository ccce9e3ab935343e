// Fused pre-attention kernel. Grid: (tokens, parts); the warps of a token's parts take its head
// vectors (every head of q, k, v, index_q and index_k), one vector a warp where there are parts
// enough:
// 1. the CTA's threads compute the token's rotary cos/sin (double, rounded to float, as the
//    CPU's rope) into shared memory;
// 2. a warp loads its vector into its shared-memory row, norms it (sum of squares in double,
//    as rms_norm), rotates its first rotary_dim values and writes it out (q, index_q, and k or
//    index_k when asked);
// 3. K, V and index-K go into their caches, one 16-value block a thread, with the cache-insert
//    kernel's writer: straight from the warp's row where a cache group is one head, and where
//    a layout flattens a token's heads into one group (heads narrower than a block) from a
//    stage the whole token's heads are written to first, by one CTA a token.
// A vector is a chain of dependent steps (load, reduce, scale, rotate, store, encode) that no
// other warp can help with, so the vectors run side by side rather than one warp working
// through several.
// -fmad=false (CMakeLists) keeps every product and sum rounded as the CPU's.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cache_write.cuh"
#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/device_query.h"
#include "backend/cuda/pre_attention.h"

namespace fp4::cuda::detail {
namespace {

constexpr int kWarps = kPreAttentionThreads / 32;

__device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) x += __shfl_xor_sync(0xffffffffu, x, d);
  return x;
}

// The slot a token's K, V and index-K go to, or -1 when its sequence, block or page is out of
// range (indices the host cannot check), which inserts nothing.
__device__ int64_t token_slot(const PreAttentionArgs& a, int t, int pos) {
  const int page_tokens = a.caches[0].page_tokens;  // the launcher checks both caches agree
  const int seq = a.seq_of_token[t], block = pos / page_tokens;
  if (seq < 0 || seq >= a.num_seqs || pos < 0 || block >= a.max_blocks) return -1;
  const int page = a.block_tables[int64_t{seq} * a.max_blocks + block];
  return page >= 0 ? int64_t{page} * page_tokens + pos % page_tokens : -1;
}

// Shared memory: cos[pairs], sin[pairs], stage[stage_floats], warp rows[kWarps][max_dim].
__global__ void __launch_bounds__(kPreAttentionThreads) pre_attention_kernel(const PreAttentionArgs a) {
  // In an MSA layer with NVFP4 index pages the indexer's scoring kernel follows as a
  // programmatic dependent: its first pages are on their way to the L2 while this kernel runs
  // (it waits for this one before it reads the query or copies a page).
  allow_dependent_launch();
  extern __shared__ float smem[];
  float* cos_s = smem;
  float* sin_s = cos_s + a.rotary_pairs;
  float* stage = sin_s + a.rotary_pairs;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* buf = stage + a.stage_floats + warp * a.max_dim;
  const int t = blockIdx.x;
  const int pos = a.positions[t];
  for (int j = threadIdx.x; j < a.rotary_pairs; j += kPreAttentionThreads) {
    double s, c;
    sincos(static_cast<double>(pos) * a.inv_freq[j], &s, &c);
    cos_s[j] = static_cast<float>(c);
    sin_s[j] = static_cast<float>(s);
  }
  __syncthreads();

  const bool staged = a.stage_floats > 0;
  int total = 0;
  for (int s = 0; s < a.num_sets; ++s) total += a.sets[s].heads;
  for (int v = blockIdx.y * kWarps + warp; v < total; v += gridDim.y * kWarps) {
    int s = 0, h = v;
    while (h >= a.sets[s].heads) h -= a.sets[s++].heads;
    const HeadSetArgs& set = a.sets[s];
    const int dim = set.dim;
    const float* x = set.x + int64_t{t} * set.stride + int64_t{h} * dim;
    double sum_sq = 0.0;
    for (int i = lane; i < dim; i += 32) {
      const float xi = x[i];  // not __ldg: q_out may be q itself
      buf[i] = xi;
      sum_sq += static_cast<double>(xi) * xi;  // exact: a float square fits a double
    }
    if (set.norm != nullptr) {
      // rms_norm's expression, in double up to the one rounding to float.
      const float inv = static_cast<float>(1.0 / sqrt(warp_sum(sum_sq) / dim + static_cast<double>(a.eps)));
      for (int i = lane; i < dim; i += 32) {
        const float w = a.gemma ? 1.0f + __ldg(set.norm + i) : __ldg(set.norm + i);
        buf[i] = buf[i] * inv * w;
      }
    }
    __syncwarp();
    if (set.rotate) {
      const int half = a.rotary_pairs;
      for (int j = lane; j < half; j += 32) {
        const float x0 = buf[j], x1 = buf[j + half];
        buf[j] = x0 * cos_s[j] - x1 * sin_s[j];
        buf[j + half] = x1 * cos_s[j] + x0 * sin_s[j];
      }
      __syncwarp();
    }
    if (set.out != nullptr) {
      float* out = set.out + (int64_t{t} * set.heads + h) * dim;
      for (int i = lane; i < dim; i += 32) out[i] = buf[i];
    }
    if (set.cache >= 0 && staged) {
      float* dst = stage + set.stage + h * dim;
      for (int i = lane; i < dim; i += 32) dst[i] = buf[i];
    } else if (set.cache >= 0) {
      const CacheTarget& c = a.caches[set.cache];
      const int64_t slot = token_slot(a, t, pos);
      for (int chunk = lane; chunk < c.chunks; chunk += 32)
        cache_write::write_cache_block<false>(c, slot, set.plane, h, chunk, buf + chunk * cache_write::kBlock);
    }
    __syncwarp();  // the row is rewritten by the warp's next vector
  }
  if (!staged) return;
  __syncthreads();
  const int64_t slot = token_slot(a, t, pos);
  for (int cache = 0; cache < a.num_caches; ++cache) {
    const CacheTarget& c = a.caches[cache];
    const int items = c.planes * c.groups * c.chunks;
    for (int i = threadIdx.x; i < items; i += kPreAttentionThreads) {
      const int chunk = i % c.chunks, g = i / c.chunks % c.groups, plane = i / (c.chunks * c.groups);
      const float* src = stage + a.source[cache][plane] + g * c.group_elems + chunk * cache_write::kBlock;
      cache_write::write_cache_block<false>(c, slot, plane, g, chunk, src);
    }
  }
}

}  // namespace

int pre_attention_parts(const PreAttentionArgs& a, int sms) {
  // Staged inserts need a token's heads in one CTA. Otherwise a token's vectors are spread over
  // CTAs until the step has about four CTAs an SM, and no further: each CTA computes its
  // token's rotary table again, which at a prefill chunk's thousands of tokens costs more than
  // the extra CTAs' parallelism gives (bench/RESULTS.md, 2026-12-07).
  if (a.stage_floats > 0) return 1;
  int vectors = 0;
  for (int s = 0; s < a.num_sets; ++s) vectors += a.sets[s].heads;
  const int64_t wanted = (4 * int64_t{std::max(sms, 1)} + a.tokens - 1) / std::max(a.tokens, 1);
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, std::max((vectors + kWarps - 1) / kWarps, 1)));
}

size_t pre_attention_smem_bytes(const PreAttentionArgs& a) {
  return sizeof(float) * (2 * size_t(a.rotary_pairs) + a.stage_floats + size_t(kWarps) * a.max_dim);
}

cudaError_t launch_pre_attention(const PreAttentionArgs& a, cudaStream_t stream) {
  const size_t smem = pre_attention_smem_bytes(a);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(pre_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  int sms = 1;
  if (const cudaError_t e = current_device_multiprocessors(&sms); e != cudaSuccess) return e;
  const int parts = pre_attention_parts(a, sms);
  const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>(parts));
  pre_attention_kernel<<<grid, kPreAttentionThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
