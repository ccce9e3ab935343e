// Device helpers of the tensor-core paged attention kernels (decode and prefill): the MMA and
// hi + lo split in the tiles' type, Q's FP16 range factor, the raw slots that FP8 and NVFP4
// sub-tiles of 16 rows land in by cp.async, and the prefill kernel's staging into 16-bit
// shared-memory tiles (BF16 pages by cp.async; FP8 and NVFP4 dequantized from a raw slot into
// FP16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/mma.cuh"
#include "backend/cuda/paged_attention_launch.h"
#include "formats/attention_operands.h"

namespace fp4::cuda::detail::tc {

constexpr int kSub = 16;  // keys per warp sub-tile: the MMA's K for P.V

// The MMA in the tiles' type.
template <bool kF16>
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  if constexpr (kF16) mma_m16n8k16_f16(c, a, b0, b1);
  else mma_m16n8k16(c, a, b0, b1);
}

template <bool kF16>
__device__ __forceinline__ void split(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  if constexpr (kF16) split_f16(x0, x1, hi, lo);
  else split_bf16(x0, x1, hi, lo);
}

// One pair as a single 16-bit operand, rounded to nearest (AttentionOperands::k16Bit): what
// split's hi part is.
template <bool kF16>
__device__ __forceinline__ uint32_t pack16(float x0, float x1) {
  if constexpr (kF16) {
    const __half2 h = __floats2half2_rn(x0, x1);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    return pack_bf16(x0, x1);
  }
}

// The power of two that brings a head of Q whose largest magnitude is m into [2^13, 2^14)
// (formats/attention_operands.h), so its FP16 hi + lo split keeps 2^-22 of each value and a
// single FP16 operand 2^-11 (1 for a zero or non-finite m; capped so that its inverse stays a
// normal float for subnormal m).
__device__ __forceinline__ float f16_range_factor(float m) { return exp2_exact(f16_query_shift(m)); }

// FP8 and NVFP4 sub-tiles come through a per-warp ring of raw slots in shared memory, filled by
// cp.async kRawStages - 1 sub-tiles ahead of the one being computed, so that a warp keeps
// several sub-tiles' bytes in flight without holding them in registers. A slot holds rows
// [row0, row0 + 16) of K, then of V: codes (their 16-byte chunks placed by RawSlot::chunk),
// then (NVFP4) block scales; each region of a sub-tile is contiguous in the page.
template <KvFormat F, int D>
struct RawSlot {
  static constexpr bool kFp4 = F == KvFormat::kNVFP4;
  static constexpr int kRowBytes = kFp4 ? D / 2 : D;
  static constexpr int kScaleRowBytes = kFp4 ? D / 16 : 0;
  static constexpr int kCodes = kSub * kRowBytes, kScales = kSub * kScaleRowBytes;
  static constexpr int kPlane = kCodes + kScales;
  static constexpr int kBytes = 2 * kPlane;         // K, then V
  static constexpr int kValues = kFp4 ? 32 : 16;    // values of one 16-byte vector of codes
  static constexpr int kVecsPerRow = D / kValues;
  static_assert(kCodes % 16 == 0 && kScales % 16 == 0, "regions of whole 16-byte chunks");
  static_assert(kVecsPerRow <= 8, "a row of at most eight 16-byte chunks");
  // land_plane's lanes take (key = lane % 16, piece = lane / 16 + 2j), so the 8 lanes of one
  // shared-memory phase read piece p of keys 8q .. 8q + 7. Chunk (key, p) sits at position
  // p ^ swizzle(key) of its row, which puts those 8 chunks in 8 distinct groups of 4 banks.
  static __device__ __forceinline__ int chunk(int key, int piece) {
    return key * kVecsPerRow + (piece ^ (key / (8 / kVecsPerRow) % kVecsPerRow));
  }
};

// Slots per warp: three for NVFP4 (2.3 KB each at head_dim 128, so four CTAs still fit an SM's
// shared memory), two for FP8 (4 KB each).
template <KvFormat F>
constexpr int kRawStages = F == KvFormat::kNVFP4 ? 3 : 2;

// Issues the copies of rows [row0, row0 + 16) of K and V into `slot` (not committed). Rows at
// or past `valid` are zero-filled, codes and scales (a chunk of scales may hold several rows),
// so a sub-tile's missing keys read as zeros. (The decode kernel fills its FragSlot through
// FragFetch, which makes the same copies.)
template <KvFormat F, int D>
__device__ __forceinline__ void issue_raw(uint8_t* slot, const AttentionArgs& a, const uint8_t* page,
                                          int row0, int valid, int lane) {
  using R = RawSlot<F, D>;
#pragma unroll
  for (int kv = 0; kv < 2; ++kv) {
    const uint8_t* codes = page + (kv == 0 ? a.k_codes : a.v_codes) + int64_t{row0} * R::kRowBytes;
    uint8_t* dst = slot + kv * R::kPlane;
#pragma unroll
    for (int c = lane; c < R::kCodes / 16; c += 32) {
      const int row = c / R::kVecsPerRow;
      cp_async16(dst + 16 * R::chunk(row, c % R::kVecsPerRow), codes + 16 * c, row < valid);
    }
    if constexpr (R::kFp4) {
      const uint8_t* scales = page + (kv == 0 ? a.k_scales : a.v_scales) + int64_t{row0} * R::kScaleRowBytes;
#pragma unroll
      for (int c = lane; c < R::kScales / 16; c += 32) {
        const int bytes = min(16, max(0, valid * R::kScaleRowBytes - 16 * c));
        cp_async16_prefix(dst + R::kCodes + 16 * c, scales + 16 * c, bytes);
      }
    }
  }
}

// FP8 and NVFP4 tiles hold FP16, exactly: E4M3 codes through the hardware conversion, E2M1
// codes as their value times 2^-14 (e2m1x8_to_f16x2_permuted) times the E4M3 block scale. The
// per-layer scale (and NVFP4's 2^14) is left to the FP32 scores and outputs. NVFP4 rows hold
// each group of 8 values in e2m1x8_to_f16x2_permuted's order; kv_dim maps a tile column back
// to its dimension.
template <KvFormat F>
__device__ __forceinline__ constexpr int kv_dim(int column) {
  if constexpr (F == KvFormat::kNVFP4) return (column & ~7) + e2m1_permuted_value(column & 7);
  return column;
}

// The factor the FP16 tiles leave out of K and V besides the per-layer scale.
template <KvFormat F>
constexpr float kTileScale = F == KvFormat::kNVFP4 ? 16384.0f : 1.0f;

// Dequantizes one plane (K or V) of a landed raw slot into the warp's tile (see above), for the
// prefill kernel (the decode kernel reads its operands from the slot, paged_attention_frag.cuh).
// Rows at or past `valid` become zeros. There is deliberately no variant that skips this masking
// for full sub-tiles: ptxas (CUDA 13.0, sm_90a) folded the test `valid == 16` on the prefill
// kernel's clamped count max(0, min(16, x)) into a predicate that sent partial sub-tiles down the
// unmasked path (docs/kernels/attention_prefill.md). Lane (key, piece) writes 16 or 32 values of
// row `key`: with the rows' pitch of D + 8, the 8 lanes of a phase hit distinct bank groups.
template <KvFormat F, int D>
__device__ __forceinline__ void land_plane(const uint8_t* plane, uint16_t* tile, int valid, int lane) {
  using R = RawSlot<F, D>;
  constexpr int P = D + 8;
  const int key = lane % 16;
#pragma unroll
  for (int j = 0; j < (R::kVecsPerRow + 1) / 2; ++j) {
    const int piece = lane / 16 + 2 * j;
    if (piece >= R::kVecsPerRow) break;  // NVFP4 at head_dim 32: one piece per row
    const uint4 v = *reinterpret_cast<const uint4*>(plane + 16 * R::chunk(key, piece));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t x[R::kValues / 2];
    if constexpr (R::kFp4) {
      // The two blocks' scales, low byte first.
      const uint32_t sf2 = e4m3x2_to_f16x2(
          *reinterpret_cast<const uint16_t*>(plane + R::kCodes + key * R::kScaleRowBytes + 2 * piece));
#pragma unroll
      for (int h = 0; h < 4; ++h) {  // words 0, 1: block 0; words 2, 3: block 1
        const uint32_t sf = prmt(sf2, 0, h < 2 ? 0x1010 : 0x3232);
        e2m1x8_to_f16x2_permuted(w[h], &x[4 * h]);
#pragma unroll
        for (int e = 0; e < 4; ++e) x[4 * h + e] = mul_f16x2(x[4 * h + e], sf);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = e4m3x2_to_f16x2(w[e / 2] >> (16 * (e % 2)));
    }
    if (key >= valid) {
#pragma unroll
      for (int e = 0; e < R::kValues / 2; ++e) x[e] = 0;
    }
    uint4* dst = reinterpret_cast<uint4*>(tile + key * P + piece * R::kValues);
#pragma unroll
    for (int e = 0; e < R::kValues / 8; ++e) dst[e] = make_uint4(x[4 * e], x[4 * e + 1], x[4 * e + 2], x[4 * e + 3]);
  }
}

// BF16 pages need no dequantization: rows [row0, row0 + 16) of one region go straight to a
// tile by cp.async, zero-filled at and past `valid`, as one commit group.
template <int D>
__device__ __forceinline__ void issue_bf16(uint16_t* tile, const uint8_t* region, int row0,
                                           int valid, int lane) {
  constexpr int P = D + 8, kVecsPerRow = D / 8;
#pragma unroll
  for (int i = lane; i < kSub * kVecsPerRow; i += 32) {
    const int key = i / kVecsPerRow, piece = i % kVecsPerRow;
    cp_async16(tile + key * P + piece * 8, region + (row0 + key) * int64_t{2 * D} + piece * 16,
               key < valid);
  }
  cp_async_commit();
}

}  // namespace fp4::cuda::detail::tc
