// Tensor-core building blocks shared by the CUDA kernels: mma.sync and ldmatrix wrappers,
// cp.async, FP32 -> BF16 / FP16 hi/lo splitting and the exact E4M3 and E2M1 expansions (FP16
// for the attention and indexer tiles and the FP16 expert kernel, BF16 for the BF16 one).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fp4::cuda::detail::tc {

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

// The same with FP16 A and B.
__device__ __forceinline__ void mma_m16n8k16_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = a . b for a 16x32 E4M3 A (row-major fragment: a0 / a1 rows g / g + 8 at k 4c..4c+3, a2 /
// a3 the same rows at k 16+4c..) and a 32x8 E4M3 B (b0 at k 4c.., b1 at k 16+4c.., column g),
// FP32 accumulation from zero. On sm_90a ptxas builds it from two FP16 MMAs (HMMA.16816.F32)
// and converts both operands to FP16 first (F2FP): exact, but no faster than FP16 MMAs on
// values already in FP16; only wgmma multiplies FP8 natively on Hopper.
__device__ __forceinline__ void mma_m16n8k32_e4m3(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// Eight E2M1 codes (value i in nibble i of w) as two words of four E4M3 codes: `even` holds
// values 0, 2, 4, 6, `odd` values 1, 3, 5, 7. Each code's sign and magnitude placed as
// sign << 7 | magnitude << 2 is an E4M3 code of the value times 2^-6, exactly (0.5 lands on a
// subnormal, as it should); no placed code is NaN.
__device__ __forceinline__ void e2m1x8_to_e4m3x8(uint32_t w, uint32_t& even, uint32_t& odd) {
  even = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u);
  odd = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);
}

// Two E4M3 codes (low byte first) as an FP16 pair: exact, NaN kept (one conversion).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_codes) {
  uint32_t d;
  asm("{\n .reg .b16 t;\n cvt.u16.u32 t, %1;\n cvt.rn.f16x2.e4m3x2 %0, t;\n}\n" : "=r"(d) : "r"(two_codes));
  return d;
}

__device__ __forceinline__ uint32_t mul_f16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// a times one half of `pair` (kHalf 0: the low one), broadcast to both lanes: one HMUL2 with a
// .H0_H0 / .H1_H1 operand, where a prmt would first have to copy the half.
template <int kHalf>
__device__ __forceinline__ uint32_t mul_f16x2_by_half(uint32_t a, uint32_t pair) {
  const __half2 x = *reinterpret_cast<const __half2*>(&a), p = *reinterpret_cast<const __half2*>(&pair);
  const __half2 r = __hmul2(x, kHalf == 0 ? __low2half2(p) : __high2half2(p));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// 16 bytes to shared memory; zero-filled when !full.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(full ? 16 : 0)
               : "memory");
}

// 16 bytes to shared memory of which the first `bytes` (0 to 16) come from src, the rest zeros.
__device__ __forceinline__ void cp_async16_prefix(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes)
               : "memory");
}

// 8 or 4 bytes to shared memory (cp.async.cg takes 16 only).
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's commit groups are pending (groups complete in order).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
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

// x0, x1 = hi + lo + r with hi, lo FP16 and |r| <= 2^-22 |x| + 2^-25 (FP16's subnormal
// spacing is 2^-24), for |x| < 2^15: x - hi is exact in FP32.
__device__ __forceinline__ void split_f16(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x0, x1);
  const float2 back = __half22float2(h);
  const __half2 l = __floats2half2_rn(x0 - back.x, x1 - back.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// Eight E2M1 codes (value i in nibble i of w) as four FP16 pairs in the order (v0, v2),
// (v4, v6), (v1, v3), (v5, v7): each code's sign and magnitude placed as the top bits of an
// FP16, which makes the pair the values times 2^-14 (0.5 lands on a subnormal, which is right).
// Multiplying by an E4M3 block scale in FP16 then stays exact: at most 6 significant bits, none
// below 2^-24.
__device__ __forceinline__ void e2m1x8_to_f16x2_permuted(uint32_t w, uint32_t out[4]) {
  // FP16 high bytes (sign << 7 | magnitude << 1) of the even codes, then of the odd ones.
  const uint32_t even = ((w << 1) & 0x0E0E0E0Eu) | ((w << 4) & 0x80808080u);
  const uint32_t odd = ((w >> 3) & 0x0E0E0E0Eu) | (w & 0x80808080u);
  out[0] = prmt(even, 0, 0x1404);  // values 0, 2
  out[1] = prmt(even, 0, 0x3424);  // 4, 6
  out[2] = prmt(odd, 0, 0x1404);   // 1, 3
  out[3] = prmt(odd, 0, 0x3424);   // 5, 7
}

// Which of the eight values of e2m1x8_to_f16x2_permuted's group sits at position c.
__device__ __forceinline__ constexpr int e2m1_permuted_value(int c) { return c < 4 ? 2 * c : 2 * (c - 4) + 1; }

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

}  // namespace fp4::cuda::detail::tc
