// NVFP4 blocks: 16 consecutive values along the contiguous dimension share one E4M3 block
// scale; each value is an E2M1 code, two per byte, the even element in the low nibble. An
// optional FP32 global scale `g` is in the dequantization direction (ModelOpt's
// `weight_scale_2`, vLLM's NVFP4 `k_scale`); the KV-cache variant uses g = 1.
//
// Exact operation order. The CPU reference runs these functions as written; the CUDA kernel
// runs the same scale input (nvfp4_scale_input) through the hardware E4M3 conversion and the
// same products through nvfp4_round_to_grid; tests prove them equal:
//   amax   = max_i |x_i|                      (NaN ignored here, flagged separately)
//   sf     = E4M3_RNE_SAT(amax / (6 * g))      (6*g rounded to fp32 first; true division)
//   d      = float(sf) * g                     (rounded to fp32)
//   r      = 1 / d                             (true division, once per block; 0 when d == 0)
//   q_i    = E2M1_RNE_SAT(x_i * r)             (q_i = 0 when r == 0)
//   x^_i   = (e2m1(q_i) * float(sf)) * g       (the first product is exact)
// Multiplying by the correctly rounded reciprocal instead of dividing (as ModelOpt does) moves
// x_i * r at most one ulp from x_i / d, which changes a code only when that ulp straddles an
// E2M1 rounding midpoint: none of 16.8 M block-scaled Gaussian values did. It saves the
// kernels a division, or two fused operations per value.
// Policies: a block whose amax/(6g) rounds below E4M3's smallest subnormal (2^-9) gets scale 0
// and dequantizes to zeros; |x| beyond 6*448*g saturates to +-6*448*g; +-inf saturates the same
// way; a NaN anywhere in the block sets the scale to E4M3 NaN, so the whole block dequantizes
// to NaN rather than to a silently wrong finite value.
#pragma once

#include <cmath>

#include "formats/amax.h"
#include "formats/minifloat.h"

namespace fp4 {

constexpr int kNvfp4BlockElems = 16;
constexpr int kNvfp4BlockCodeBytes = kNvfp4BlockElems / 2;
constexpr int kNvfp4BlockScaleBytes = 1;
constexpr float kE2M1Max = 6.0f;
static_assert(kNvfp4BlockCodeBytes == 8, "16 E2M1 codes pack into 8 bytes");
static_assert(kNvfp4BlockCodeBytes + kNvfp4BlockScaleBytes == 9, "an NVFP4 block is 9 bytes");

// The dequantization-direction global scale ModelOpt derives from a tensor's amax, so that the
// largest block scale lands on E4M3's maximum: amax / (6 * 448). An all-zero tensor gets 1.
inline float nvfp4_global_scale_for_amax(float tensor_amax) {
  return tensor_amax > 0.0f ? tensor_amax / (kE2M1Max * kE4M3Max) : 1.0f;
}

// The pieces of the recipe, exposed so that a kernel which spreads one block over several
// threads (and reduces amax with shuffles) computes the same bits.
// What the block scale rounds from: amax / (6 * g), with 6 * g rounded first.
FP4_HD float nvfp4_scale_input(float amax, float global_scale) {
  return amax / (kE2M1Max * global_scale);
}

FP4_HD uint8_t nvfp4_scale_code(float amax, bool has_nan, float global_scale) {
  return has_nan ? kE4M3NaN : e4m3_encode(nvfp4_scale_input(amax, global_scale));
}

// The divisor of every value in the block: float(sf) * g.
FP4_HD float nvfp4_value_divisor(uint8_t scale, float global_scale) {
  return e4m3_decode(scale) * global_scale;
}

FP4_HD float nvfp4_value_reciprocal(float divisor) {
  return divisor != 0.0f ? 1.0f / divisor : 0.0f;
}

FP4_HD uint8_t nvfp4_encode_value(float x, float reciprocal) {
  return reciprocal != 0.0f ? e2m1_encode(x * reciprocal) : uint8_t{0};
}

// x * reciprocal rounded to the E2M1 grid, returned as a float (one of +-{0, .5, 1, 1.5, 2, 3,
// 4, 6}, with x's sign); e2m1_encode of it is nvfp4_encode_value(x, reciprocal). Floating-point
// operations only, because kernels issue those at twice the rate of integer ones: |q| + 2^22
// (2^23, 2^24) has a last place of 0.5 (1, 2), E2M1's spacing in [0, 2) ([2, 4), [4, 6]), so
// the fp32 adder rounds onto the grid with ties to even; inf and NaN quotients clamp to 6.
// kShift = -6 returns the grid value times 2^-6, for a reciprocal scaled by 2^-6 (the kernels
// feed the result straight to the E4M3 converter, saving a multiply per value). Scaling by 2^-6
// is exact while 1/d and 1/(64 d) are normal floats, which nvfp4_fast_divisor(64 d) ensures;
// a quotient that turns subnormal is far below 0.25 and rounds to 0 either way.
constexpr float kFastDivisorMin = 0x1p-90f;
constexpr float kFastDivisorMax = 0x1p90f;

FP4_HD bool nvfp4_fast_divisor(float divisor) {
  return divisor >= kFastDivisorMin && divisor <= kFastDivisorMax;
}

template <int kShift = 0>
FP4_HD float nvfp4_round_to_grid(float x, float reciprocal) {
  static_assert(kShift == 0 || kShift == -6, "scales of 1 and 2^-6 are the ones tested");
  constexpr float kUnit = kShift == 0 ? 1.0f : 0x1p-6f;
#if defined(__CUDA_ARCH__)
  const float a = fabsf(x * reciprocal);
#else
  const float a = std::fabs(x * reciprocal);
#endif
  const float magic = a < 2.0f * kUnit ? 0x1p22f * kUnit : (a < 4.0f * kUnit ? 0x1p23f * kUnit : 0x1p24f * kUnit);
  const float on_grid = (a + magic) - magic;
  const float magnitude = on_grid < kE2M1Max * kUnit ? on_grid : kE2M1Max * kUnit;  // NaN -> 6 too
  return bits_to_float(float_to_bits(magnitude) | (float_to_bits(x) & 0x80000000u));
}

// A NaN scale yields the canonical quiet NaN directly: NaN arithmetic would leave
// platform-specific payloads (x86 propagates the operand's, the GPU returns 0x7FFFFFFF).
FP4_HD float nvfp4_decode_value(uint8_t code, float scale_value, float global_scale) {
  return is_nan(scale_value) ? quiet_nan() : (e2m1_decode(code) * scale_value) * global_scale;
}

// Quantizes x[0..15]; writes 8 packed bytes and returns the E4M3 block-scale code.
FP4_HD uint8_t nvfp4_quantize_block(const float* x, float global_scale, uint8_t* packed) {
  float amax = 0.0f;
  bool has_nan = false;
  for (int i = 0; i < kNvfp4BlockElems; ++i) accumulate_amax(x[i], amax, has_nan);
  const uint8_t scale = nvfp4_scale_code(amax, has_nan, global_scale);
  const float reciprocal = nvfp4_value_reciprocal(nvfp4_value_divisor(scale, global_scale));
  for (int i = 0; i < kNvfp4BlockCodeBytes; ++i) {
    const uint8_t lo = nvfp4_encode_value(x[2 * i], reciprocal);
    const uint8_t hi = nvfp4_encode_value(x[2 * i + 1], reciprocal);
    packed[i] = static_cast<uint8_t>(lo | (hi << 4));
  }
  return scale;
}

FP4_HD void nvfp4_dequantize_block(const uint8_t* packed, uint8_t scale, float global_scale,
                                   float* out) {
  const float sf = e4m3_decode(scale);
  for (int i = 0; i < kNvfp4BlockCodeBytes; ++i) {
    out[2 * i] = nvfp4_decode_value(packed[i] & 0xFu, sf, global_scale);
    out[2 * i + 1] = nvfp4_decode_value(packed[i] >> 4, sf, global_scale);
  }
}

// Byte sizes of a row-major [rows, cols] NVFP4 tensor: codes [rows, cols/2] then, in their own
// array, scales [rows, cols/16] (the linear layout of checkpoints and of our KV pages).
constexpr int64_t nvfp4_code_bytes(int64_t rows, int64_t cols) { return rows * cols / 2; }
constexpr int64_t nvfp4_scale_bytes(int64_t rows, int64_t cols) {
  return rows * cols / kNvfp4BlockElems;
}

}  // namespace fp4
