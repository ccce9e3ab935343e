// The MSA indexer's block scores on tensor cores (docs/kernels/indexer.md, "Tensor cores").
// Each warp scores 32 keys of a page as two 16-key tiles: the keys are the rows of
// mma.m16n8k16's A, dequantized exactly to BF16 in registers, and the queries its B, whose 8
// columns hold 4 heads' BF16 hi parts and then their lo parts (hi + lo is the FP32 query to
// 2^-18). The dot products are permuted along head_dim so that each thread reads whole 16-byte
// units of its rows (B is permuted the same way), and the hi and lo columns meet in one
// shuffle before the block maximum.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/indexer_topk.h"
#include "backend/cuda/indexer_topk_device.cuh"
#include "backend/cuda/mma.cuh"
#include "formats/minifloat.h"

namespace fp4::cuda::detail {
namespace {

using kvcache::PageDType;

constexpr int kWarps = kScoreThreads / 32;
constexpr int kHeadsPerPass = 4;  // B's 8 columns: 4 heads' hi parts, then the same heads' lo parts
constexpr int kMaxPasses = kMmaMaxHeads / kHeadsPerPass;
constexpr int kTile = 16;  // keys per MMA: its M
constexpr int kTilesPerWarp = kMaxPageTokens / (kWarps * kTile);

// The split of a key row over the 4 threads of an MMA row group: thread c = lane % 4 reads
// units c, c + 4, c + 8, ... of kUnit bytes each, and k-step j of the MMA takes 4 consecutive
// values of one of them. Stored rows are kStride apart in shared memory: a quarter-warp phase
// of unit reads covers 128 / (4 kUnit) rows of 4 kUnit contiguous bytes, and a stride that is
// an odd multiple of 4 kUnit puts those rows on distinct banks.
template <PageDType D, int kDim>
struct Split {
  static constexpr int kRowBytes = static_cast<int>(kvcache::page_code_bytes(D, kDim));
  static constexpr int kUnit = kRowBytes / 4 < 16 ? kRowBytes / 4 : 16;
  static constexpr int kUnitValues = D == PageDType::kNVFP4 ? 2 * kUnit : D == PageDType::kFP8 ? kUnit : kUnit / 2;
  static constexpr int kUnits = kRowBytes / (4 * kUnit);  // per thread and row
  static constexpr int kStepsPerUnit = kUnitValues / 4;
  static constexpr int kSteps = kDim / 16;
  static constexpr int kScalesPerUnit = D == PageDType::kNVFP4 ? kUnitValues / 16 : 0;
  static constexpr int kStride = kRowBytes % (8 * kUnit) == 0 ? kRowBytes + 4 * kUnit : kRowBytes;
  using Rows = PageRows<D, kDim, kStride>;
  static_assert(kUnit == 8 || kUnit == 16, "8- or 16-byte unit reads");
  static_assert(kUnits * kStepsPerUnit == kSteps, "the units cover the row");
  static_assert(D != PageDType::kNVFP4 || kUnitValues % 16 == 0, "whole NVFP4 blocks per unit");
};

// The head_dim index of value e (0..3) of k-step j for thread c: the same for A and B.
template <PageDType D, int kDim>
__device__ __forceinline__ int dim_of(int c, int j, int e) {
  using S = Split<D, kDim>;
  return (c + 4 * (j / S::kStepsPerUnit)) * S::kUnitValues + 4 * (j % S::kStepsPerUnit) + e;
}

// One unit of one row as BF16 pairs (values 2i, 2i + 1 in pair i), exactly: BF16 as stored,
// E4M3 through the hardware conversion to FP16 (exact, NaN kept), E2M1 times its E4M3 block
// scale (at most 6 significant bits). The FP8 per-layer scale is applied to the block maxima.
template <PageDType D, int kDim>
__device__ __forceinline__ void unit_to_bf16(const uint8_t* codes, const uint8_t* scales, uint32_t* out) {
  using S = Split<D, kDim>;
  uint32_t w[4];
  if constexpr (S::kUnit == 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(codes);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(codes);
    w[0] = v.x, w[1] = v.y, w[2] = 0, w[3] = 0;
  }
  if constexpr (D == PageDType::kBF16) {
#pragma unroll
    for (int i = 0; i < S::kUnit / 4; ++i) out[i] = w[i];
  } else if constexpr (D == PageDType::kFP8) {
#pragma unroll
    for (int i = 0; i < S::kUnit / 2; ++i) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(w[i / 2] >> (16 * (i % 2)));
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      out[i] = tc::pack_bf16(f.x, f.y);
    }
  } else {
#pragma unroll
    for (int b = 0; b < S::kScalesPerUnit; ++b) {  // words 2b, 2b + 1 are one 16-value block
      const float sf = e4m3_decode(scales[b]);
      const uint32_t sf2 = tc::pack_bf16(sf, sf);  // exact: E4M3 fits BF16
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t* x = out + 8 * b + 4 * h;
        tc::e2m1x8_to_bf16x2(w[2 * b + h], x);
#pragma unroll
        for (int e = 0; e < 4; ++e) x[e] = tc::mul_bf16x2(x[e], sf2);
      }
    }
  }
}

// Grid (tokens, splits), as the exact kernel's. Shared memory: the B fragments
// [passes][kSteps][32 lanes] (b0, b1), then the page stages.
template <PageDType D, int kDim>
__global__ void __launch_bounds__(kScoreThreads) indexer_score_mma_kernel(IndexerArgs a) {
  using S = Split<D, kDim>;
  using R = typename S::Rows;
  extern __shared__ uint4 smem[];
  __shared__ float partial[kWarps][kMmaMaxHeads];
  const int64_t t = blockIdx.x;
  const int passes = (a.heads + kHeadsPerPass - 1) / kHeadsPerPass;
  uint2* q_frag = reinterpret_cast<uint2*>(smem);
  uint8_t* stages = reinterpret_cast<uint8_t*>(q_frag + passes * S::kSteps * 32);
  const int stage_bytes = R::stage_bytes(a.page_tokens);
  const float* q = a.index_q + t * a.heads * kDim;
  for (int i = threadIdx.x; i < passes * S::kSteps * 32; i += kScoreThreads) {
    const int lane = i % 32, step = i / 32 % S::kSteps, pass = i / (32 * S::kSteps);
    const int group = lane / 4, head = pass * kHeadsPerPass + group % kHeadsPerPass;
    const bool lo = group >= kHeadsPerPass;
    uint32_t half[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {  // b0: values 0, 1 of the step; b1: values 2, 3
      const int d = dim_of<D, kDim>(lane % 4, step, 2 * k);
      const float x0 = head < a.heads ? q[head * kDim + d] : 0.0f;
      const float x1 = head < a.heads ? q[head * kDim + d + 1] : 0.0f;
      uint32_t hi_bits, lo_bits;
      tc::split_bf16(x0, x1, hi_bits, lo_bits);
      half[k] = lo ? lo_bits : hi_bits;
    }
    q_frag[i] = make_uint2(half[0], half[1]);
  }

  const float kNegInf = __int_as_float(0xFF800000);
  const float out_scale = D == PageDType::kFP8 ? a.scale : 1.0f;
  const int64_t pos = a.positions[t];
  const int64_t seq = a.seq_of_token[t];
  const int64_t visible = visible_blocks(a, t);
  const int64_t first = static_cast<int64_t>(blockIdx.y) * a.blocks_per_split;
  const int64_t end = first + a.blocks_per_split < a.max_blocks ? first + a.blocks_per_split : a.max_blocks;
  const int64_t scored_end = end < visible ? end : visible;
  float* scores = a.scores + t * a.heads * a.max_blocks;
  for (int64_t b = scored_end > first ? scored_end : first; b < end; ++b) {
    for (int h = threadIdx.x; h < a.heads; h += kScoreThreads) scores[h * a.max_blocks + b] = kNegInf;
  }

  const PageStream<R> pages{a, stages, seq, pos, first, scored_end, stage_bytes};
  pages.start();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int c = lane % 4, group = lane / 4;
  for (int64_t b = first; b < scored_end; ++b) {
    pages.wait(b);  // this page (and, the first time, the B fragments) written by every thread
    const bool readable = pages.page(b) != nullptr;
    const int keys = pages.keys(b);
    const uint8_t* rows = pages.stage(b);
    const uint8_t* scale_rows = rows + R::scales_at(a.page_tokens);
    // Thread (group, c) keeps the maxima of heads 2c, 2c + 1 of each pass (lanes with c < 2
    // hold the answer; c = 2, 3 hold the same sums).
    float best[kMaxPasses][2];
#pragma unroll
    for (int p = 0; p < kMaxPasses; ++p) best[p][0] = best[p][1] = kNegInf;
#pragma unroll
    for (int tile = 0; tile < kTilesPerWarp; ++tile) {
      const int row0 = (warp * kTilesPerWarp + tile) * kTile;
      if (!readable || row0 >= keys) continue;  // warp-uniform
      float acc[kMaxPasses][4] = {};
#pragma unroll
      for (int u = 0; u < S::kUnits; ++u) {
        uint32_t x[2][S::kUnitValues / 2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = row0 + group + 8 * r;
          unit_to_bf16<D, kDim>(rows + row * R::kCodeStride + (c + 4 * u) * S::kUnit,
                                scale_rows + row * R::kScaleBytes + (c + 4 * u) * S::kScalesPerUnit, x[r]);
        }
#pragma unroll
        for (int s = 0; s < S::kStepsPerUnit; ++s) {
          const uint32_t frag[4] = {x[0][2 * s], x[1][2 * s], x[0][2 * s + 1], x[1][2 * s + 1]};
#pragma unroll
          for (int p = 0; p < kMaxPasses; ++p) {
            if (p < passes) {
              const uint2 bq = q_frag[(p * S::kSteps + u * S::kStepsPerUnit + s) * 32 + lane];
              tc::mma_m16n8k16(acc[p], frag, bq.x, bq.y);
            }
          }
        }
      }
      const bool valid0 = row0 + group < keys, valid1 = row0 + group + 8 < keys;
#pragma unroll
      for (int p = 0; p < kMaxPasses; ++p) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[p][e] += __shfl_xor_sync(0xFFFFFFFFu, acc[p][e], 2);  // hi + lo
        // fmaxf skips a NaN dot product (a NaN key), as the CPU's std::max(best, dot) does.
        best[p][0] = fmaxf(best[p][0], valid0 ? acc[p][0] : kNegInf);
        best[p][1] = fmaxf(best[p][1], valid0 ? acc[p][1] : kNegInf);
        best[p][0] = fmaxf(best[p][0], valid1 ? acc[p][2] : kNegInf);
        best[p][1] = fmaxf(best[p][1], valid1 ? acc[p][3] : kNegInf);
      }
    }
#pragma unroll
    for (int p = 0; p < kMaxPasses; ++p) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
#pragma unroll
        for (int offset = 4; offset < 32; offset <<= 1)
          best[p][e] = fmaxf(best[p][e], __shfl_xor_sync(0xFFFFFFFFu, best[p][e], offset));
        if (lane < 2 && p < passes) partial[warp][p * kHeadsPerPass + 2 * lane + e] = best[p][e];
      }
    }
    __syncthreads();  // partial written; every thread is done with this stage
    if (static_cast<int>(threadIdx.x) < a.heads) {
      float m = partial[0][threadIdx.x];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) m = fmaxf(m, partial[w][threadIdx.x]);
      scores[threadIdx.x * a.max_blocks + b] = m * out_scale;
    }
  }
  cp_async_wait<0>();  // nothing may be left in flight at exit
}

template <PageDType D, int kDim>
ScoreVariant variant(const IndexerArgs& a) {
  using S = Split<D, kDim>;
  const int passes = (a.heads + kHeadsPerPass - 1) / kHeadsPerPass;
  const size_t frag_bytes = static_cast<size_t>(passes) * S::kSteps * 32 * sizeof(uint2);
  return {indexer_score_mma_kernel<D, kDim>,
          frag_bytes + static_cast<size_t>(S::Rows::kStages) * S::Rows::stage_bytes(a.page_tokens)};
}

template <PageDType D>
ScoreVariant variant_for_dim(const IndexerArgs& a) {
  return a.head_dim == 64 ? variant<D, 64>(a) : a.head_dim == 128 ? variant<D, 128>(a)
       : a.head_dim == 256 ? variant<D, 256>(a) : ScoreVariant{};
}

}  // namespace

ScoreVariant mma_score_variant(const IndexerArgs& a) {
  if (a.heads < 1 || a.heads > kMmaMaxHeads || a.page_tokens > kMaxPageTokens) return {};
  switch (a.dtype) {
    case PageDType::kBF16: return variant_for_dim<PageDType::kBF16>(a);
    case PageDType::kFP8: return variant_for_dim<PageDType::kFP8>(a);
    case PageDType::kNVFP4: return variant_for_dim<PageDType::kNVFP4>(a);
    case PageDType::kFP32: return {};  // FP32 keys do not fit BF16 exactly: the exact kernel
  }
  return {};
}

}  // namespace fp4::cuda::detail
