// Device helpers of the tensor-core paged attention kernel (paged_attention_mma.cu): MMA,
// ldmatrix and cp.async wrappers, FP32 -> BF16 hi/lo splitting, and the staging of 16-row
// K/V sub-tiles into BF16 shared-memory tiles (by cp.async for BF16 pages, through registers
// with on-the-fly dequantization for FP8 and NVFP4 pages).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/paged_attention_launch.h"
#include "formats/minifloat.h"

namespace fp4::cuda::detail::tc {

constexpr int kSub = 16;  // keys per warp sub-tile: the MMA's K for P.V

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// c += a . b for a 16x16 BF16 A (row-major fragment) and a 16x8 B (column-major fragment).
__device__ __forceinline__ void mma_m16n8k16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes to shared memory; zero-filled when !full.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(full ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162_raw h) {
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return bf16x2_bits(__floats2bfloat162_rn(lo, hi));
}

// x0, x1 = hi + lo + r with hi, lo BF16 and |r| <= 2^-18 |x|: x - hi is exact in FP32.
__device__ __forceinline__ void split_bf16(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 back = __bfloat1622float2(h);
  hi = bf16x2_bits(h);
  lo = pack_bf16(x0 - back.x, x1 - back.y);
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// Eight E2M1 codes (value 2i in the low nibble of byte i) as four BF16 pairs, (v0, v1) first.
// The magnitudes come from byte tables indexed by prmt: low and high bytes of the BF16 bits of
// 0, .5, 1, 1.5, 2, 3, 4, 6. The signs come from prmt's sign-replicate mode: byte k of w << 4
// has value 2k's sign as its top bit, byte k of w value 2k+1's.
__device__ __forceinline__ void e2m1x8_to_bf16x2(uint32_t w, uint32_t out[4]) {
  constexpr uint32_t kLow03 = 0xC0800000u, kLow47 = 0xC0804000u;
  constexpr uint32_t kHigh03 = 0x3F3F3F00u, kHigh47 = 0x40404040u;
  const uint32_t mag = w & 0x77777777u;
  const uint32_t low_a = prmt(kLow03, kLow47, mag), high_a = prmt(kHigh03, kHigh47, mag);
  const uint32_t low_b = prmt(kLow03, kLow47, mag >> 16), high_b = prmt(kHigh03, kHigh47, mag >> 16);
  const uint32_t w4 = w << 4;
  out[0] = prmt(low_a, high_a, 0x5140) | (prmt(w4, w, 0xC080) & 0x80008000u);
  out[1] = prmt(low_a, high_a, 0x7362) | (prmt(w4, w, 0xD090) & 0x80008000u);
  out[2] = prmt(low_b, high_b, 0x5140) | (prmt(w4, w, 0xE0A0) & 0x80008000u);
  out[3] = prmt(low_b, high_b, 0x7362) | (prmt(w4, w, 0xF0B0) & 0x80008000u);
}

__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                   *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

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
