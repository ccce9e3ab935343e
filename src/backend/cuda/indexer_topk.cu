// Kernels of the MSA indexer (docs/kernels/indexer.md). Scoring streams each of a token's
// index-K pages once through shared memory (coalesced 16-byte asynchronous copies, double
// buffered); each thread then decodes one key with the formats/ codecs and takes its dot
// product with every index head's query. Products and sums are separate IEEE operations in the
// CPU reference's order, so each score is the reference's float.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <utility>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/indexer_topk.h"
#include "backend/cuda/indexer_topk_device.cuh"
#include "formats/minifloat.h"

namespace fp4::cuda::detail {
namespace {

using kvcache::PageDType;

constexpr int kHeadsPerPass = 4;  // query heads whose dot products one pass over a key computes
constexpr int kWarps = kScoreThreads / 32;
constexpr int kChunk = 16;        // values decoded at once: one NVFP4 block

// The exact kernel's rows: padded by 16 bytes where that keeps each thread's 16-byte reads of
// its own row free of bank conflicts.
template <PageDType D, int kDim>
using Rows = PageRows<D, kDim, kvcache::page_code_bytes(D, kDim) % 32 == 0 ? static_cast<int>(kvcache::page_code_bytes(D, kDim)) + 16
                                                                        : static_cast<int>(kvcache::page_code_bytes(D, kDim))>;

// The stored bytes of one chunk of a key row.
template <PageDType D> struct Chunk;
template <> struct Chunk<PageDType::kFP32> { uint4 w[4]; };
template <> struct Chunk<PageDType::kBF16> { uint4 w[2]; };
template <> struct Chunk<PageDType::kFP8> { uint4 w[1]; };
template <> struct Chunk<PageDType::kNVFP4> { uint2 codes; uint32_t scale; };

template <PageDType D, int kCodeBytes>
__device__ __forceinline__ Chunk<D> load_chunk(const uint8_t* codes, const uint8_t* scales, int c) {
  Chunk<D> x;
  if constexpr (D == PageDType::kNVFP4) {
    if constexpr (kCodeBytes >= 16) {
      // Chunk pairs as one 16-byte read: the padded rows are conflict-free at that width only.
      const uint4 pair = reinterpret_cast<const uint4*>(codes)[c / 2];
      x.codes = c % 2 == 0 ? make_uint2(pair.x, pair.y) : make_uint2(pair.z, pair.w);
    } else {
      x.codes = reinterpret_cast<const uint2*>(codes)[c];
    }
    x.scale = scales[c];
  } else {
    constexpr int kWords = sizeof(x.w) / sizeof(uint4);
#pragma unroll
    for (int k = 0; k < kWords; ++k) x.w[k] = reinterpret_cast<const uint4*>(codes)[kWords * c + k];
  }
  return x;
}

__device__ __forceinline__ uint32_t word(const uint4& w, int k) {
  return k == 0 ? w.x : k == 1 ? w.y : k == 2 ? w.z : w.w;
}

// How a page's codes become kvcache::read_index_page's values.
struct Dequant {
  float scale = 1.0f;   // FP8
  float folded = 0.0f;  // FP8: scale * 2^120 when that is finite
};

// kvcache::read_index_page's values (NVFP4: times 2^-14), NaN aside: NaN stands for "this
// key's dot product is NaN", which the block maximum ignores on both sides, so only the flag
// has to agree. FP8 places the code bits as e4m3_decode does (value * 2^-120, exact) and
// multiplies once by scale * 2^120: the exact product is the CPU's (value * 2^120) * scale, so
// is its rounding.
template <PageDType D>
__device__ __forceinline__ void decode_chunk(const Chunk<D>& x, const Dequant& dq, float* v, bool& nan) {
  if constexpr (D == PageDType::kFP32) {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) v[i] = __uint_as_float(word(x.w[i / 4], i % 4));
  } else if constexpr (D == PageDType::kBF16) {
#pragma unroll
    for (int i = 0; i < kChunk / 2; ++i) {
      const uint32_t w = word(x.w[i / 4], i % 4);
      v[2 * i] = bf16_decode(static_cast<uint16_t>(w & 0xFFFFu));
      v[2 * i + 1] = bf16_decode(static_cast<uint16_t>(w >> 16));
    }
  } else if constexpr (D == PageDType::kFP8) {
#pragma unroll
    for (int k = 0; k < kChunk / 4; ++k) {
      const uint32_t w = word(x.w[0], k);
      nan |= (((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0;  // a byte of 0x7F or 0xFF
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t b = w >> (8 * i);
        const float placed = __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7Fu) << 20));
        v[4 * k + i] = dq.folded != 0.0f ? __fmul_rn(placed, dq.folded)
                                         : __fmul_rn(__fmul_rn(placed, 0x1p120f), dq.scale);
      }
    }
  } else {
    // value * sf * 2^-14 in f16, exactly: the E2M1 bits placed as an f16 are value * 2^-14, and
    // times an E4M3 scale the product has at most 6 significant bits and is at least 2^-24, the
    // smallest f16. The queries were scaled by 2^14 to match (exact), so each product q * k is
    // the CPU's real product, rounded the same. A NaN scale makes the block NaN on both sides.
    const __half2 sf = __half2half2(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(x.scale), __NV_E4M3)));
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const uint32_t codes = w == 0 ? x.codes.x : x.codes.y;
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // elements k and k + 4 of this word, one f16 pair
        const uint32_t t = codes >> (4 * k);
        const uint32_t bits = ((t << 12) & 0x80008000u) | ((t << 9) & 0x0E000E00u);
        __half2 pair;
        memcpy(&pair, &bits, sizeof pair);
        const float2 f = __half22float2(__hmul2(pair, sf));
        v[8 * w + k] = f.x;
        v[8 * w + k + 4] = f.y;
      }
    }
  }
}

// dot(q_h, key) for kHeadsPerPass heads, as the CPU's dot(): acc[l] sums the products of
// elements l, l + 4, l + 8, ... in order, then (acc0 + acc2) + (acc1 + acc3) + 0.
template <PageDType D, int kDim>
__device__ __forceinline__ void key_dots(const uint8_t* codes, const uint8_t* scales, const Dequant& dq,
                                         const float* q,  // shared, [kHeadsPerPass, kDim]
                                         float* dots) {
  float acc[kHeadsPerPass][4] = {};
  bool nan = false;
#pragma unroll
  for (int c = 0; c < kDim / kChunk; ++c) {
    float v[kChunk];
    decode_chunk<D>(load_chunk<D, Rows<D, kDim>::kCodeBytes>(codes, scales, c), dq, v, nan);
#pragma unroll
    for (int h = 0; h < kHeadsPerPass; ++h) {
      const float4* qh = reinterpret_cast<const float4*>(q + h * kDim + c * kChunk);
#pragma unroll
      for (int i = 0; i < kChunk / 4; ++i) {
        const float4 qq = qh[i];  // the same address in every lane: a broadcast
        acc[h][0] = __fadd_rn(acc[h][0], __fmul_rn(qq.x, v[4 * i]));
        acc[h][1] = __fadd_rn(acc[h][1], __fmul_rn(qq.y, v[4 * i + 1]));
        acc[h][2] = __fadd_rn(acc[h][2], __fmul_rn(qq.z, v[4 * i + 2]));
        acc[h][3] = __fadd_rn(acc[h][3], __fmul_rn(qq.w, v[4 * i + 3]));
      }
    }
  }
#pragma unroll
  for (int h = 0; h < kHeadsPerPass; ++h) {
    const float s = __fadd_rn(__fadd_rn(acc[h][0], acc[h][2]), __fadd_rn(acc[h][1], acc[h][3]));
    dots[h] = nan ? __int_as_float(0x7FFFFFFF) : __fadd_rn(s, 0.0f);  // the CPU adds its (empty) tail: -0 becomes +0
  }
}

// Grid (tokens, splits): CTA (t, s) scores blocks [s, s + 1) * blocks_per_split of token t for
// every head. Its pages stream through shared memory (PageStream), the next ones' copies in
// flight while the current one is scored; each thread scores one key.
// kRounded: the query is FP8 (a.query_format), rounded here as the CPU rounds it; a template
// parameter so that the FP32 query's kernel carries none of the rounding's registers.
template <PageDType D, int kDim, bool kRounded>
__global__ void __launch_bounds__(kScoreThreads) indexer_score_kernel(IndexerArgs a) {
  allow_dependent_launch();  // the select kernel's CTAs wait for the scores themselves
  using R = Rows<D, kDim>;
  extern __shared__ float4 smem[];  // queries [heads rounded up to 4, kDim], then the stages
  __shared__ float partial[kWarps][kHeadsPerPass];
  const int64_t t = blockIdx.x;
  const int heads_padded = (a.heads + kHeadsPerPass - 1) / kHeadsPerPass * kHeadsPerPass;
  float* q_s = reinterpret_cast<float*>(smem);
  uint8_t* stages = reinterpret_cast<uint8_t*>(q_s + heads_padded * kDim);
  const float* q = a.index_q + t * a.heads * kDim;
  // NVFP4 keys come out of decode_chunk times 2^-14, so the queries go in times 2^14 (exact).
  constexpr float kQueryScale = D == PageDType::kNVFP4 ? 0x1p14f : 1.0f;
  if constexpr (kRounded) {
    round_query_rows(q, q_s, a.heads, heads_padded, kDim, a.query_format, kQueryScale);
  } else {
    for (int i = threadIdx.x; i < heads_padded * kDim; i += kScoreThreads)
      q_s[i] = i < a.heads * kDim ? __fmul_rn(q[i], kQueryScale) : 0.0f;
  }

  const float kNegInf = __int_as_float(0xFF800000);
  Dequant dq;
  dq.scale = a.scale;
  if (D == PageDType::kFP8 && isfinite(a.scale * 0x1p120f)) dq.folded = a.scale * 0x1p120f;
  float* scores = a.scores + t * a.heads * a.max_blocks;
  PageStream<R> pages = split_pages<R>(a, t, stages, scores);
  pages.start();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t b = pages.first; b < pages.end; ++b) {
    const uint8_t* rows = pages.wait(b);  // this page (and, the first time, the queries) written by every thread
    const bool readable = pages.page(b) != nullptr;
    const int keys = pages.keys(b);
    const uint8_t* scale_rows = rows + R::scales_at(a.page_tokens);
    for (int h0 = 0; h0 < heads_padded; h0 += kHeadsPerPass) {
      float best[kHeadsPerPass];
#pragma unroll
      for (int h = 0; h < kHeadsPerPass; ++h) best[h] = kNegInf;
      const int j = threadIdx.x;  // page_tokens <= kScoreThreads
      if (readable && j < keys) {
        float dots[kHeadsPerPass];
        key_dots<D, kDim>(rows + j * R::kCodeStride, scale_rows + j * R::kScaleBytes, dq, q_s + h0 * kDim, dots);
        // The CPU's std::max(best, dot): a NaN dot product never enters.
#pragma unroll
        for (int h = 0; h < kHeadsPerPass; ++h) best[h] = dots[h] > best[h] ? dots[h] : best[h];
      }
#pragma unroll
      for (int h = 0; h < kHeadsPerPass; ++h) {
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1)
          best[h] = fmaxf(best[h], __shfl_xor_sync(0xFFFFFFFFu, best[h], offset));
        if (lane == 0) partial[warp][h] = best[h];
      }
      __syncthreads();
      if (threadIdx.x < kHeadsPerPass && h0 + static_cast<int>(threadIdx.x) < a.heads) {
        float m = partial[0][threadIdx.x];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) m = fmaxf(m, partial[w][threadIdx.x]);
        scores[(h0 + threadIdx.x) * a.max_blocks + b] = m;
      }
      __syncthreads();  // partial, and this stage, are rewritten next
    }
  }
  cp_async_wait<0>();  // nothing may be left in flight at exit
}

size_t query_bytes(const IndexerArgs& a) {
  const int heads_padded = (a.heads + kHeadsPerPass - 1) / kHeadsPerPass * kHeadsPerPass;
  return static_cast<size_t>(heads_padded) * a.head_dim * sizeof(float);
}

template <PageDType D, int kDim>
ScoreVariant variant(const IndexerArgs& a) {
  using R = Rows<D, kDim>;
  const ScoreKernel kernel = a.query_format == IndexQueryFormat::kFP32 ? indexer_score_kernel<D, kDim, false>
                                                                       : indexer_score_kernel<D, kDim, true>;
  return {kernel, query_bytes(a) + static_cast<size_t>(R::kStages) * R::stage_bytes(a.page_tokens)};
}

template <PageDType D>
ScoreVariant variant_for_dim(const IndexerArgs& a) {
  return a.head_dim == 16 ? variant<D, 16>(a) : a.head_dim == 32 ? variant<D, 32>(a)
       : a.head_dim == 64 ? variant<D, 64>(a) : a.head_dim == 128 ? variant<D, 128>(a)
       : a.head_dim == 256 ? variant<D, 256>(a) : ScoreVariant{};
}

ScoreVariant exact_score_variant(const IndexerArgs& a) {
  switch (a.dtype) {
    case PageDType::kFP32: return variant_for_dim<PageDType::kFP32>(a);
    case PageDType::kBF16: return variant_for_dim<PageDType::kBF16>(a);
    case PageDType::kFP8: return variant_for_dim<PageDType::kFP8>(a);
    case PageDType::kNVFP4: return variant_for_dim<PageDType::kNVFP4>(a);
  }
  return {};
}

// Above 48 KiB a kernel must opt in to its dynamic shared memory, once per device; the
// attribute call is host time an eager decode step would otherwise pay per layer.
cudaError_t allow_smem(const void* kernel, size_t smem) {
  if (smem <= 48 * 1024) return cudaSuccess;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  thread_local std::map<std::pair<const void*, int>, size_t> allowed;
  size_t& done = allowed[{kernel, device}];
  if (done >= smem) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e == cudaSuccess) done = smem;
  return e;
}

// The tensor-core kernel where it takes the shapes and was asked for, the exact one otherwise.
ScoreVariant score_variant(const IndexerArgs& a) {
  if (a.tensor_cores) {
    const ScoreVariant v = mma_score_variant(a);
    if (v.kernel != nullptr) return v;
  }
  return exact_score_variant(a);
}

}  // namespace

bool indexer_score_on_tensor_cores(const IndexerArgs& a) { return a.tensor_cores && mma_score_variant(a).kernel != nullptr; }

size_t indexer_score_smem_bytes(const IndexerArgs& a) { return score_variant(a).smem; }

cudaError_t indexer_score_ctas_per_sm(const IndexerArgs& a, int& ctas) {
  const ScoreVariant v = score_variant(a);
  if (v.kernel == nullptr) return cudaErrorInvalidValue;
  const cudaError_t e = allow_smem(reinterpret_cast<const void*>(v.kernel), v.smem);
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, v.kernel, kScoreThreads, v.smem);
}

cudaError_t launch_indexer_scores(const IndexerArgs& a, unsigned splits, cudaStream_t stream) {
  const ScoreVariant v = score_variant(a);
  if (v.kernel == nullptr) return cudaErrorInvalidValue;
  const cudaError_t e = allow_smem(reinterpret_cast<const void*>(v.kernel), v.smem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(a.tokens), splits);
  // On NVFP4 pages the tensor-core kernels are programmatic dependents of the kernel before:
  // their first chunks are on their way to the L2 while it ends. On FP8 pages the early launch
  // lost 7% at batch 128 and 8K-32K, with or without the prefetch (bench/RESULTS.md,
  // 2026-12-06), so the others launch plainly.
  if (a.dtype == PageDType::kNVFP4 && indexer_score_on_tensor_cores(a)) {
    return launch_dependent(v.kernel, grid, dim3(kScoreThreads), v.smem, stream, a);
  }
  v.kernel<<<grid, kScoreThreads, v.smem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
