// The MSA indexer's FP8 path for NVFP4 index pages (docs/kernels/indexer.md, "FP8 path"): the
// query in one or two E4M3 parts (formats/e4m3_query.h), the keys' E2M1 codes placed as E4M3
// codes (the value times 2^-6, exact, about 7 integer operations per 8 codes), mma.m16n8k32
// with FP32 accumulation, and each block's E4M3 scale applied to the MMA's partial sums (one
// FFMA each), so the keys stay exact and only the query carries the FP8 rounding. Opt-in
// (IndexerMath::kFp8TensorCores): on sm_90a ptxas builds each E4M3 mma.sync from two FP16 MMAs
// on converted operands, which makes this kernel slower than the FP16 one on the same query.
//
// Each warp scores 32 keys of a page as two 16-key tiles (the page streaming of
// indexer_warp_chunks.cuh). Thread c of a row group reads word c of each 16-byte unit of its
// two rows: 8 codes of block 2u + c / 2, even values as A's low k half, odd ones as its high
// half. One A fragment thus holds two blocks; two MMAs take it, each with a B that is zero in
// the other block's k slots, so each MMA's sums belong to one block and its scale. B's 8
// columns hold 4 heads' hi and lo parts side by side (column 2h head h's hi, 2h + 1 its lo), so
// thread c's accumulator pair is head c's hi and lo, added before the block maximum.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/indexer_topk.h"
#include "backend/cuda/indexer_topk_device.cuh"
#include "backend/cuda/indexer_warp_chunks.cuh"
#include "backend/cuda/mma.cuh"
#include "formats/e4m3_query.h"

namespace fp4::cuda::detail {
namespace {

using kvcache::PageDType;

constexpr int kTile = 16;         // keys per MMA: its M
constexpr int kHeadsPerPass = 4;  // B's 8 columns: 4 heads x (hi, lo)
// E2M1 codes placed as E4M3 are the value times 2^-6; the block maxima are scaled back.
constexpr int kKeyShift = 6;

// A row of kDim codes is kUnits 16-byte units of two blocks each. A warp's word reads cover
// 8 rows x 16 bytes, on distinct banks when the row stride is an odd multiple of 16 bytes.
template <int kDim>
struct Fp8Rows {
  static constexpr int kRowBytes = kDim / 2;
  static constexpr int kUnits = kRowBytes / 16;
  static constexpr int kStride = kRowBytes % 32 == 0 ? kRowBytes + 16 : kRowBytes;
  static constexpr int kScaleBytes = kDim / 16;
  static constexpr int kScaleWords = kScaleBytes / 4;
  static_assert(kUnits >= 2 && kScaleWords >= 1, "whole units of two blocks");
};

// A row's block scales, as 32-bit words (4, 8 or 16 bytes in one load).
template <int kWords>
__device__ __forceinline__ void load_scale_words(const uint8_t* p, uint32_t* w) {
  if constexpr (kWords == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else if constexpr (kWords == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  } else {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}

// The scales of blocks 2u and 2u + 1 of a row, exactly (E4M3 -> FP16 -> FP32; NaN kept).
__device__ __forceinline__ float2 block_scale_pair(const uint32_t* words, int u) {
  const uint32_t pair = tc::e4m3x2_to_f16x2(words[u / 2] >> (16 * (u % 2)));
  return __half22float2(*reinterpret_cast<const __half2*>(&pair));
}

// Grid (tokens, splits), as the other scoring kernels'. Shared memory: the B fragments
// [kPasses][kUnits][32 lanes] (block 2u's b0, b1, then block 2u + 1's), then each warp's chunk
// ring.
template <int kDim, int kPasses>
__global__ void __launch_bounds__(kScoreThreads) indexer_score_fp8_kernel(IndexerArgs a) {
  allow_dependent_launch();  // the select kernel's CTAs wait for the scores themselves
  using R = Fp8Rows<kDim>;
  using C = Chunk<PageDType::kNVFP4, kDim, R::kStride>;
  extern __shared__ uint4 smem[];
  const int64_t t = blockIdx.x;
  uint4* q_frag = smem;
  uint8_t* rings = reinterpret_cast<uint8_t*>(q_frag + kPasses * R::kUnits * 32);
  const float* q = a.index_q + t * a.heads * kDim;
  __shared__ int head_shift[kMmaMaxHeads];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  prefetch_first_chunks<PageDType::kNVFP4, kDim, R::kStride>(a, t, lane);
  wait_for_prerequisite_grid();  // the query (and the newest page rows) may come from the kernel before
  for (int h = warp; h < a.heads; h += kWarps) {
    const int shift = warp_query_shift(q + h * kDim, kDim, lane);
    if (lane == 0) head_shift[h] = shift;
  }
  __syncthreads();
  const int parts = query_parts(a.query_format);
  for (int i = threadIdx.x; i < kPasses * R::kUnits * 32; i += kScoreThreads) {
    const int frag_lane = i % 32, u = i / 32 % R::kUnits, pass = i / (32 * R::kUnits);
    const int column = frag_lane / 4, c = frag_lane % 4, head = pass * kHeadsPerPass + column / 2;
    const bool lo = column % 2 == 1;
    // Byte k of b0 is value 2k of the lane's word (A's low k half), of b1 value 2k + 1.
    uint32_t b[2] = {0, 0};
    if (head < a.heads) {
#pragma unroll
      for (int v = 0; v < 8; ++v) {
        const E4M3Parts p = e4m3_query_encode(q[head * kDim + 32 * u + 8 * c + v], head_shift[head], parts);
        b[v % 2] |= uint32_t{lo ? p.lo : p.hi} << (8 * (v / 2));
      }
    }
    q_frag[i] = c < 2 ? make_uint4(b[0], b[1], 0, 0) : make_uint4(0, 0, b[0], b[1]);
  }
  __syncthreads();  // q_frag written by every thread
  uint4 b_frag[kPasses == 1 ? R::kUnits : 1];
  if constexpr (kPasses == 1) {
#pragma unroll
    for (int u = 0; u < R::kUnits; ++u) b_frag[u] = q_frag[u * 32 + lane];
  }

  const float kNegInf = __int_as_float(0xFF800000);
  float* scores = a.scores + t * a.heads * a.max_blocks;
  using Stream = WarpChunks<PageDType::kNVFP4, kDim, R::kStride>;
  Stream stream = start_warp_chunks<PageDType::kNVFP4, kDim, R::kStride>(a, rings, t, scores, lane);
  const int c = lane % 4, group = lane / 4;
  float best[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) best[p] = kNegInf;
  for (int tag = stream.next_tag(); tag != Stream::kNone; tag = stream.next_tag()) {
    const uint8_t* rows = stream.next();
    const uint8_t* scale_rows = rows + C::kScalesAt;
#pragma unroll
    for (int tile = 0; tile < C::kKeys / kTile; ++tile) {
      const int row[2] = {tile * kTile + group, tile * kTile + group + 8};
      uint32_t scale_words[2][R::kScaleWords];
#pragma unroll
      for (int r = 0; r < 2; ++r) load_scale_words<R::kScaleWords>(scale_rows + row[r] * R::kScaleBytes, scale_words[r]);
      float acc[kPasses][4] = {};  // rows group, group + 8 x (hi, lo) of head 4p + c
#pragma unroll
      for (int u = 0; u < R::kUnits; ++u) {
        uint32_t frag[4];  // a0 / a1: rows group / group + 8, even values; a2 / a3: odd values
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t w = *reinterpret_cast<const uint32_t*>(rows + row[r] * R::kStride + 16 * u + 4 * c);
          tc::e2m1x8_to_e4m3x8(w, frag[r], frag[2 + r]);
        }
        const float2 sf[2] = {block_scale_pair(scale_words[0], u), block_scale_pair(scale_words[1], u)};
#pragma unroll
        for (int p = 0; p < kPasses; ++p) {
          uint4 bq;
          if constexpr (kPasses == 1) bq = b_frag[u];
          else bq = q_frag[(p * R::kUnits + u) * 32 + lane];
          float first[4], second[4];  // the sums of block 2u, of block 2u + 1
          tc::mma_m16n8k32_e4m3(first, frag, bq.x, bq.y);
          tc::mma_m16n8k32_e4m3(second, frag, bq.z, bq.w);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int r = k / 2;
            acc[p][k] = __fmaf_rn(sf[r].x, first[k], acc[p][k]);
            acc[p][k] = __fmaf_rn(sf[r].y, second[k], acc[p][k]);
          }
        }
      }
#pragma unroll
      for (int p = 0; p < kPasses; ++p) best[p] = fold_tile(best[p], acc[p]);  // a NaN scale or query is skipped
    }
    if (tag < 0) continue;  // the page goes on in the next chunk
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      best[p] = page_max(best[p]);
      const int h = p * kHeadsPerPass + lane;
      if (lane < kHeadsPerPass && h < a.heads) scores[h * a.max_blocks + tag] = ldexpf(best[p], kKeyShift - head_shift[h]);
      best[p] = kNegInf;
    }
  }
  cp_async_wait<0>();  // nothing may be left in flight at exit
}

template <int kDim, int kPasses>
ScoreVariant variant() {
  using R = Fp8Rows<kDim>;
  using C = Chunk<PageDType::kNVFP4, kDim, R::kStride>;
  const size_t frag_bytes = static_cast<size_t>(kPasses) * R::kUnits * 32 * sizeof(uint4);
  return {indexer_score_fp8_kernel<kDim, kPasses>, frag_bytes + static_cast<size_t>(kWarps) * C::kStages * C::kBytes};
}

template <int kDim>
ScoreVariant variant_for_heads(const IndexerArgs& a) {
  return a.heads <= 4 ? variant<kDim, 1>() : a.heads <= 8 ? variant<kDim, 2>() : variant<kDim, 4>();
}

}  // namespace

ScoreVariant fp8_score_variant(const IndexerArgs& a) {
  if (!a.fp8_mma || a.dtype != PageDType::kNVFP4 || a.query_format == IndexQueryFormat::kFP32) return {};
  if (a.heads < 1 || a.heads > kMmaMaxHeads || a.page_tokens > kMaxPageTokens) return {};
  return a.head_dim == 64 ? variant_for_heads<64>(a) : a.head_dim == 128 ? variant_for_heads<128>(a)
       : a.head_dim == 256 ? variant_for_heads<256>(a) : ScoreVariant{};
}

}  // namespace fp4::cuda::detail
