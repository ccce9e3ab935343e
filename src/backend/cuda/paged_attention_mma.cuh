// Device helpers of the tensor-core paged attention kernel (paged_attention_mma.cu): the staging of 16-row
// K/V sub-tiles into BF16 shared-memory tiles (by cp.async for BF16 pages, through registers
// with on-the-fly dequantization for FP8 and NVFP4 pages).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/mma.cuh"
#include "backend/cuda/paged_attention_launch.h"
#include "formats/minifloat.h"

namespace fp4::cuda::detail::tc {

constexpr int kSub = 16;  // keys per warp sub-tile: the MMA's K for P.V

// FP8 and NVFP4 sub-tiles pass through registers: 16 rows of K and V, 16-byte vectors of 16
// (FP8) or 32 (NVFP4, with their two block-scale bytes) values; vector i of a region is piece
// i % kVecsPerRow of row i / kVecsPerRow, so a warp reads whole rows.
template <KvFormat F, int D>
struct RawSub {
  static constexpr bool kFp4 = F == KvFormat::kNVFP4;
  static constexpr int kValues = kFp4 ? 32 : 16;
  static constexpr int kVecsPerRow = D / kValues;
  static constexpr int kVecs = kSub * kVecsPerRow;
  static constexpr int kPer = (kVecs + 31) / 32;
  static constexpr int kRowBytes = kFp4 ? D / 2 : D;
  static_assert(kRowBytes * (kFp4 ? 2 : 1) == D, "codes of one row");
  uint4 v[2][kPer];  // [K, V]
  uint32_t scales[2][kPer];
};

// Issues the loads of rows [row0, row0 + 16) of K and V; rows at or past `valid` stay zero
// (their bytes may be unwritten slots).
template <KvFormat F, int D>
__device__ __forceinline__ void load_raw(RawSub<F, D>& r, const AttentionArgs& a,
                                         const uint8_t* page, int row0, int valid, int lane) {
  using R = RawSub<F, D>;
#pragma unroll
  for (int j = 0; j < R::kPer; ++j) {
    const int i = lane + 32 * j, key = i / R::kVecsPerRow, piece = i % R::kVecsPerRow;
    const bool live = i < R::kVecs && key < valid;
    const int64_t row = row0 + key;
#pragma unroll
    for (int kv = 0; kv < 2; ++kv) {
      const int64_t codes = kv == 0 ? a.k_codes : a.v_codes;
      r.v[kv][j] = live ? __ldg(reinterpret_cast<const uint4*>(page + codes + row * R::kRowBytes) + piece)
                        : make_uint4(0, 0, 0, 0);
      r.scales[kv][j] = 0;
      if (R::kFp4 && live) {
        const int64_t block_scales = kv == 0 ? a.k_scales : a.v_scales;
        r.scales[kv][j] = __ldg(reinterpret_cast<const unsigned short*>(
                                    page + block_scales + row * (D / 16)) + piece);
      }
    }
  }
}

// Dequantizes the loaded sub-tile into the warp's K and V tiles as BF16 without the per-layer
// scale (exact: E4M3, and E2M1 x E4M3, fit BF16).
template <KvFormat F, int D>
__device__ __forceinline__ void land_raw(const RawSub<F, D>& r, uint16_t* k_s, uint16_t* v_s,
                                         int lane) {
  using R = RawSub<F, D>;
  constexpr int P = D + 8;
#pragma unroll
  for (int j = 0; j < R::kPer; ++j) {
    const int i = lane + 32 * j, key = i / R::kVecsPerRow, piece = i % R::kVecsPerRow;
    if (i >= R::kVecs) break;
#pragma unroll
    for (int kv = 0; kv < 2; ++kv) {
      const uint32_t w[4] = {r.v[kv][j].x, r.v[kv][j].y, r.v[kv][j].z, r.v[kv][j].w};
      uint32_t x[R::kValues / 2];
      if constexpr (R::kFp4) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {  // words 2b, 2b + 1 are one 16-value block
          const float sf = e4m3_decode(static_cast<uint8_t>(r.scales[kv][j] >> (8 * b)));
          const uint32_t sf2 = pack_bf16(sf, sf);  // exact: E4M3 fits BF16
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            e2m1x8_to_bf16x2(w[2 * b + h], &x[8 * b + 4 * h]);
#pragma unroll
            for (int e = 0; e < 4; ++e) x[8 * b + 4 * h + e] = mul_bf16x2(x[8 * b + 4 * h + e], sf2);
          }
        }
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const uint32_t word = w[e / 2] >> (16 * (e % 2));
          x[e] = pack_bf16(e4m3_decode(static_cast<uint8_t>(word)),
                           e4m3_decode(static_cast<uint8_t>(word >> 8)));
        }
      }
      uint4* dst = reinterpret_cast<uint4*>((kv == 0 ? k_s : v_s) + key * P + piece * R::kValues);
#pragma unroll
      for (int e = 0; e < R::kValues / 8; ++e) {
        dst[e] = make_uint4(x[4 * e], x[4 * e + 1], x[4 * e + 2], x[4 * e + 3]);
      }
    }
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
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace fp4::cuda::detail::tc
