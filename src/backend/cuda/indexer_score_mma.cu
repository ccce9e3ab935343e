// The MSA indexer's block scores on tensor cores (docs/kernels/indexer.md, "Tensor cores").
// Each warp scores 32 keys of a page as two 16-key tiles: the keys are the rows of
// mma.m16n8k16's A, dequantized exactly in registers, and the queries its B, whose 8 columns
// hold 4 heads' hi and lo parts side by side. BF16 pages multiply in BF16 (hi + lo is the
// FP32 query to 2^-18). FP8 and NVFP4 pages multiply in FP16, which takes their values with
// fewer instructions (one hardware conversion per E4M3 pair; E2M1 codes placed as FP16 bits):
// each head's query is scaled by a power of two into FP16's range first (hi + lo is then the
// query to 2^-22), and its block maxima are scaled back. The dot products are permuted along
// head_dim so that each thread reads whole 16-byte units of its rows (B is permuted the same
// way), and each thread's accumulator pairs are one head's hi and lo columns, added in place
// before the block maximum. The query split is index_q, or its FP8 rounding read back when
// the params ask for an FP8 query (the FP8 MMA kernel, indexer_score_fp8.cu, is the other way
// to take that query on NVFP4 pages).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/indexer_topk.h"
#include "backend/cuda/indexer_topk_device.cuh"
#include "backend/cuda/indexer_warp_chunks.cuh"
#include "backend/cuda/mma.cuh"
#include "formats/minifloat.h"

namespace fp4::cuda::detail {
namespace {

using kvcache::PageDType;

constexpr int kHeadsPerPass = 4;  // B's 8 columns: column 2h is head h's hi part, 2h + 1 its lo part
constexpr int kTile = 16;  // keys per MMA: its M

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
  static constexpr bool kF16 = D != PageDType::kBF16;  // FP16 MMAs (else BF16)
  static_assert(kUnit == 8 || kUnit == 16, "8- or 16-byte unit reads");
  static_assert(kUnits * kStepsPerUnit == kSteps, "the units cover the row");
  static_assert(D != PageDType::kNVFP4 || kUnitValues % 16 == 0, "whole NVFP4 blocks per unit");
};

// The head_dim index of value e (0..3) of k-step j for thread c: the same for A and B. A k-step
// takes values (e0, e1) as its low pair and (e2, e3) as its high pair (A's registers a0 / a1
// and a2 / a3). BF16 and FP8 units give them in storage order, 4 per step; an NVFP4 word of 8
// codes gives two steps, values (0, 2 | 4, 6) and (1, 3 | 5, 7), the order unit_to_pairs
// makes them in.
template <PageDType D, int kDim>
__device__ __forceinline__ int dim_of(int c, int j, int e) {
  using S = Split<D, kDim>;
  const int unit_start = (c + 4 * (j / S::kStepsPerUnit)) * S::kUnitValues, step = j % S::kStepsPerUnit;
  if constexpr (D == PageDType::kNVFP4) return unit_start + 8 * (step / 2) + step % 2 + 2 * e;
  return unit_start + 4 * step + e;
}

// One unit of one row as pairs in the MMA's type, exactly: pair 2s is step s's low pair, pair
// 2s + 1 its high pair (dim_of's order). BF16 as stored. E4M3 through the hardware conversion
// to FP16 (NaN kept); the FP8 per-layer scale multiplies the block maxima. E2M1 codes placed as
// FP16 bits are the value times 2^-14 (subnormal for 0.5, which is right), times the E4M3 block
// scale in FP16: at most 6 significant bits, none below 2^-24, so exact.
template <PageDType D, int kDim>
__device__ __forceinline__ void unit_to_pairs(const uint8_t* codes, const uint8_t* scales, uint32_t* out) {
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
    for (int i = 0; i < S::kUnit / 2; ++i) out[i] = tc::e4m3x2_to_f16x2(w[i / 2] >> (16 * (i % 2)));
  } else {
    const uint32_t sf2 = tc::e4m3x2_to_f16x2(S::kScalesPerUnit == 2 ? *reinterpret_cast<const uint16_t*>(scales)
                                                                    : uint32_t{scales[0]});
#pragma unroll
    for (int i = 0; i < S::kUnit / 4; ++i) {  // word i: 8 codes, block i / 2 (sf2's half i / 2)
      tc::e2m1x8_to_f16x2_permuted(w[i], &out[4 * i]);  // values 0, 2 | 4, 6 | 1, 3 | 5, 7
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        out[4 * i + e] = i / 2 == 0 ? tc::mul_f16x2_by_half<0>(out[4 * i + e], sf2)
                                    : tc::mul_f16x2_by_half<1>(out[4 * i + e], sf2);
      }
    }
  }
}

// Grid (tokens, splits), as the exact kernel's. Shared memory: the B fragments
// [kPasses][kSteps][32 lanes] (b0, b1), then each warp's chunk ring. kPasses passes of 4 heads
// (1, 2 or 4; heads past a.heads are zero columns): a compile-time count keeps the per-tile
// epilogue to the heads there are. Each warp scores whole pages, so a block's maximum never
// leaves the warp.
template <PageDType D, int kDim, int kPasses>
__global__ void __launch_bounds__(kScoreThreads) indexer_score_mma_kernel(IndexerArgs a) {
  allow_dependent_launch();  // the select kernel's CTAs wait for the scores themselves
  using S = Split<D, kDim>;
  using C = Chunk<D, kDim, S::kStride>;
  extern __shared__ uint4 smem[];
  const int64_t t = blockIdx.x;
  uint2* q_frag = reinterpret_cast<uint2*>(smem);
  uint8_t* rings = reinterpret_cast<uint8_t*>(q_frag + kPasses * S::kSteps * 32);
  const float* q = a.index_q + t * a.heads * kDim;
  // FP16 MMAs: each head's query times 2^shift, its largest magnitude in [2^14, 2^15) (exact,
  // and far from FP16's 65504); the block maxima are scaled back by the inverse.
  // With an FP8 query (query_format), the values split are its rounding, read back (fp8_shift:
  // each head's shift of that rounding).
  __shared__ int head_shift[kMmaMaxHeads], fp8_shift[kMmaMaxHeads];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // NVFP4 pages: a programmatic dependent of the kernel before (launch_indexer_scores); other
  // formats are launched plainly, and the wait returns at once.
  if constexpr (D == PageDType::kNVFP4) prefetch_first_chunks<D, kDim, S::kStride>(a, t, lane);
  wait_for_prerequisite_grid();  // the query (and the newest page rows) may come from the kernel before
  const IndexQueryFormat format = a.query_format;
  if (S::kF16 || format != IndexQueryFormat::kFP32) {
    for (int h = warp; h < a.heads; h += kWarps) {
      const int shift8 = format == IndexQueryFormat::kFP32 ? 0 : warp_query_shift(q + h * kDim, kDim, lane);
      float m = 0.0f;
      for (int e = lane; e < kDim; e += 32) m = fmaxf(m, fabsf(scored_query(q[h * kDim + e], shift8, format)));
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, offset));
      int exponent = 0;
      frexpf(m, &exponent);
      if (lane == 0) {
        head_shift[h] = S::kF16 && m > 0.0f && isfinite(m) ? 15 - exponent : 0;
        fp8_shift[h] = shift8;
      }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < kPasses * S::kSteps * 32; i += kScoreThreads) {
    const int frag_lane = i % 32, step = i / 32 % S::kSteps, pass = i / (32 * S::kSteps);
    // Column n of B is held by the lanes of group n; the accumulator gives thread c columns 2c
    // and 2c + 1, so a head's hi and lo land in one thread's register pair.
    const int column = frag_lane / 4, head = pass * kHeadsPerPass + column / 2;
    const bool lo = column % 2 == 1;
    float x[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float given = head < a.heads ? q[head * kDim + dim_of<D, kDim>(frag_lane % 4, step, e)] : 0.0f;
      x[e] = format == IndexQueryFormat::kFP32 || head >= a.heads ? given : scored_query(given, fp8_shift[head], format);
      if constexpr (S::kF16) x[e] = head < a.heads ? ldexpf(x[e], head_shift[head]) : 0.0f;
    }
    uint32_t half[2];  // b0: values e0, e1; b1: e2, e3
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      uint32_t hi_bits, lo_bits;
      if constexpr (S::kF16) tc::split_f16(x[2 * k], x[2 * k + 1], hi_bits, lo_bits);
      else tc::split_bf16(x[2 * k], x[2 * k + 1], hi_bits, lo_bits);
      half[k] = lo ? lo_bits : hi_bits;
    }
    q_frag[i] = make_uint2(half[0], half[1]);
  }
  __syncthreads();  // q_frag written by every thread
  // With one pass the B fragments fit in registers (2 per k-step) and are not re-read from
  // shared memory for every tile.
  uint2 b_frag[kPasses == 1 ? S::kSteps : 1];
  if constexpr (kPasses == 1) {
#pragma unroll
    for (int j = 0; j < S::kSteps; ++j) b_frag[j] = q_frag[j * 32 + lane];
  }
  // Lanes 0 to 3 write heads 4p + lane: their maxima go back by the query's power of two (NVFP4
  // keys were multiplied as value x 2^-14) and the FP8 per-layer scale.
  const float out_scale = D == PageDType::kFP8 ? a.scale : 1.0f;
  constexpr int kKeyShift = D == PageDType::kNVFP4 ? 14 : 0;

  const float kNegInf = __int_as_float(0xFF800000);
  float* scores = a.scores + t * a.heads * a.max_blocks;
  WarpChunks<D, kDim, S::kStride> stream = start_warp_chunks<D, kDim, S::kStride>(a, rings, t, scores, lane);
  const int c = lane % 4, group = lane / 4;
  // Thread (group, c) keeps the maximum of head 4p + c of each pass over its rows.
  float best[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) best[p] = kNegInf;
  for (int tag = stream.next_tag(); tag != WarpChunks<D, kDim, S::kStride>::kNone; tag = stream.next_tag()) {
    const uint8_t* rows = stream.next();
    const uint8_t* scale_rows = rows + C::kScalesAt;
#pragma unroll
    for (int tile = 0; tile < C::kKeys / kTile; ++tile) {
      float acc[kPasses][4] = {};
#pragma unroll
      for (int u = 0; u < S::kUnits; ++u) {
        uint32_t x[2][S::kUnitValues / 2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = tile * kTile + group + 8 * r;
          unit_to_pairs<D, kDim>(rows + row * S::kStride + (c + 4 * u) * S::kUnit,
                                scale_rows + row * C::kScaleBytes + (c + 4 * u) * S::kScalesPerUnit, x[r]);
        }
#pragma unroll
        for (int s = 0; s < S::kStepsPerUnit; ++s) {
          const uint32_t frag[4] = {x[0][2 * s], x[1][2 * s], x[0][2 * s + 1], x[1][2 * s + 1]};
#pragma unroll
          for (int p = 0; p < kPasses; ++p) {
            const int step = u * S::kStepsPerUnit + s;
            uint2 bq;
            if constexpr (kPasses == 1) bq = b_frag[step];
            else bq = q_frag[(p * S::kSteps + step) * 32 + lane];
            if constexpr (S::kF16) tc::mma_m16n8k16_f16(acc[p], frag, bq.x, bq.y);
            else tc::mma_m16n8k16(acc[p], frag, bq.x, bq.y);
          }
        }
      }
#pragma unroll
      for (int p = 0; p < kPasses; ++p) best[p] = fold_tile(best[p], acc[p]);  // a NaN key is skipped
    }
    if (tag < 0) continue;  // the page goes on in the next chunk
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      best[p] = page_max(best[p]);
      const int h = p * kHeadsPerPass + lane;
      if (lane < kHeadsPerPass && h < a.heads) {
        float m = best[p];
        if constexpr (S::kF16) m = ldexpf(m, kKeyShift - head_shift[h]);
        scores[h * a.max_blocks + tag] = m * out_scale;
      }
      best[p] = kNegInf;
    }
  }
  cp_async_wait<0>();  // nothing may be left in flight at exit
}

template <PageDType D, int kDim, int kPasses>
ScoreVariant variant(const IndexerArgs& a) {
  using S = Split<D, kDim>;
  using C = Chunk<D, kDim, S::kStride>;
  const size_t frag_bytes = static_cast<size_t>(kPasses) * S::kSteps * 32 * sizeof(uint2);
  return {indexer_score_mma_kernel<D, kDim, kPasses>, frag_bytes + static_cast<size_t>(kWarps) * C::kStages * C::kBytes};
}

template <PageDType D, int kDim>
ScoreVariant variant_for_heads(const IndexerArgs& a) {
  return a.heads <= 4 ? variant<D, kDim, 1>(a) : a.heads <= 8 ? variant<D, kDim, 2>(a) : variant<D, kDim, 4>(a);
}

template <PageDType D>
ScoreVariant variant_for_dim(const IndexerArgs& a) {
  return a.head_dim == 64 ? variant_for_heads<D, 64>(a) : a.head_dim == 128 ? variant_for_heads<D, 128>(a)
       : a.head_dim == 256 ? variant_for_heads<D, 256>(a) : ScoreVariant{};
}

}  // namespace

ScoreVariant mma_score_variant(const IndexerArgs& a) {
  if (a.heads < 1 || a.heads > kMmaMaxHeads || a.page_tokens > kMaxPageTokens) return {};
  switch (a.dtype) {
    case PageDType::kBF16: return variant_for_dim<PageDType::kBF16>(a);
    case PageDType::kFP8: return variant_for_dim<PageDType::kFP8>(a);
    case PageDType::kNVFP4:
      if (const ScoreVariant fp8 = fp8_score_variant(a); fp8.kernel != nullptr) return fp8;
      return variant_for_dim<PageDType::kNVFP4>(a);
    case PageDType::kFP32: return {};  // FP32 keys do not fit BF16 exactly: the exact kernel
  }
  return {};
}

}  // namespace fp4::cuda::detail
