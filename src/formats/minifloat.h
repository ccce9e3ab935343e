// Scalar codecs for the small floating-point formats: E2M1 (FP4), E4M3 "fn" and E5M2 (FP8),
// FP16, BF16 and the UE8M0 power-of-two scale. Encoders round to nearest, ties to even, and
// saturate exactly as the CUDA toolkit's host conversions do (cuda_fp8.h, cuda_fp4.h,
// cuda_fp16.h, cuda_bf16.h); tests/unit/formats proves it on all 2^32 float inputs.
//
// Special values (matching the toolkit):
//   E4M3  satfinite: |x| > 448 (and +-inf) -> +-448; NaN of either sign -> 0x7F.
//   E5M2  satfinite: |x| > 57344 (and +-inf) -> +-57344; NaN -> 0x7F.
//   E2M1  satfinite: |x| > 6 (and +-inf) -> +-6; NaN -> 0x7 (+6). E2M1 has no NaN.
//   FP16  IEEE: overflow -> +-inf; BF16 IEEE: overflow -> +-inf; NaN keeps a quiet NaN.
#pragma once

#include "formats/hd.h"

namespace fp4 {

// RNE, saturating encoder for the magnitude of a sign-magnitude minifloat with kManBits mantissa
// bits, exponent bias kBias and largest finite magnitude code kMaxCode. `abs_bits` are the fp32
// bits of a non-negative, non-NaN value. The value is counted in quanta of the target at its
// own exponent; the rounded count, placed above the exponent offset, is the code, and a count
// that rounds up to the next binade carries into the exponent field by itself.
template <int kManBits, int kBias, uint32_t kMaxCode>
FP4_HD uint32_t encode_magnitude_rne_sat(uint32_t abs_bits) {
  if (abs_bits >= 0x7F800000u) return kMaxCode;  // +inf saturates
  const int exp32 = static_cast<int>(abs_bits >> 23);
  if (exp32 == 0) return 0;  // fp32 zero or subnormal: far below every target's quantum
  constexpr int kMinNormalExp = 1 - kBias;
  const int e = exp32 - 127;
  const int e_eff = e < kMinNormalExp ? kMinNormalExp : e;
  // value = mant24 * 2^(exp32 - 150); quantum = 2^(e_eff - kManBits).
  const uint32_t mant24 = (abs_bits & 0x7FFFFFu) | 0x800000u;
  const int shift = 150 + e_eff - kManBits - exp32;
  if (shift >= 25) return 0;  // below half a quantum
  uint32_t count = mant24 >> shift;
  const uint32_t rem = mant24 & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (count & 1u))) ++count;
  const uint32_t code = (static_cast<uint32_t>(e_eff - kMinNormalExp) << kManBits) + count;
  return code > kMaxCode ? kMaxCode : code;
}

// Exact value of a magnitude code (no specials).
template <int kManBits, int kBias>
FP4_HD float decode_magnitude(uint32_t mag) {
  const uint32_t exp_field = mag >> kManBits;
  const uint32_t mant = mag & ((1u << kManBits) - 1u);
  if (exp_field == 0) return static_cast<float>(mant) * exp2_exact(1 - kBias - kManBits);
  return static_cast<float>(mant | (1u << kManBits)) *
         exp2_exact(static_cast<int>(exp_field) - kBias - kManBits);
}

// ---- E2M1: S E E M, bias 1, values +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no inf/NaN ----
constexpr uint8_t kE2M1MaxCode = 0x7;

// RNE by letting the fp32 adder round: a + 2^22 has a last place of 0.5, a + 2^23 of 1 and
// a + 2^24 of 2, exactly E2M1's spacing in [0, 2), [2, 4) and [4, 6]; the add rounds a to that
// grid with ties to even (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4,
// 5 -> 4), and the low bits of the sum count the steps. Above 5 saturates to 6, +-inf too;
// NaN -> +6 as in the toolkit (NaN's bits count as "many steps"). Selects, not branches:
// kernels run this per element and lanes must not diverge.
FP4_HD uint8_t e2m1_encode(float x) {
  const uint32_t b = float_to_bits(x);
  const float a = bits_to_float(b & 0x7FFFFFFFu);
  const uint32_t halves = float_to_bits(a + 0x1p22f) - 0x4A800000u;  // codes 0..4 = 0, .5, 1, 1.5, 2
  const uint32_t ones = float_to_bits(a + 0x1p23f) - 0x4B000000u;    // 2, 3, 4 -> codes 4, 5, 6
  const uint32_t twos = float_to_bits(a + 0x1p24f) - 0x4B800000u;    // 2 steps = 4.0 -> 6; more -> 7
  const uint32_t mag = a < 2.0f ? halves : a < 4.0f ? ones + 2u : (twos >= 3u ? 7u : 6u);
  const uint32_t sign = is_nan(a) ? 0u : (b >> 31) << 3;
  return static_cast<uint8_t>(sign | mag);
}

// The three magnitude bits, placed as an fp32 exponent-and-mantissa, give the value times
// 2^-126 exactly (code 1, 0.5, becomes the subnormal 2^-127); one exact multiply restores it.
// Needs denormals kept (no flush-to-zero), as every build of this code has.
FP4_HD float e2m1_decode(uint8_t code) {
  const uint32_t bits = (static_cast<uint32_t>(code & 0x8u) << 28) | (static_cast<uint32_t>(code & 0x7u) << 22);
  return bits_to_float(bits) * 0x1p126f;
}

// ---- E4M3 "fn": bias 7, max 448 (0x7E), NaN 0x7F/0xFF, no inf ----
constexpr uint8_t kE4M3MaxCode = 0x7E;
constexpr uint8_t kE4M3NaN = 0x7F;
constexpr float kE4M3Max = 448.0f;

FP4_HD uint8_t e4m3_encode(float x) {
  const uint32_t b = float_to_bits(x), a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE4M3NaN;
  return static_cast<uint8_t>(((b >> 31) << 7) | encode_magnitude_rne_sat<3, 7, kE4M3MaxCode>(a));
}

// Same placement trick as E2M1: magnitude bits << 20 is the value times 2^-120 as an fp32
// (E4M3 subnormals land on fp32 subnormals), restored by one exact multiply.
FP4_HD float e4m3_decode(uint8_t code) {
  if ((code & 0x7Fu) == 0x7Fu) return quiet_nan();
  const uint32_t bits = (static_cast<uint32_t>(code & 0x80u) << 24) | (static_cast<uint32_t>(code & 0x7Fu) << 20);
  return bits_to_float(bits) * 0x1p120f;
}

// ---- E5M2: bias 15, max 57344 (0x7B), inf 0x7C, NaN 0x7D..0x7F ----
constexpr uint8_t kE5M2MaxCode = 0x7B;

FP4_HD uint8_t e5m2_encode(float x) {
  const uint32_t b = float_to_bits(x), a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  return static_cast<uint8_t>(((b >> 31) << 7) | encode_magnitude_rne_sat<2, 15, kE5M2MaxCode>(a));
}

FP4_HD float e5m2_decode(uint8_t code) {
  const uint32_t mag = code & 0x7Fu;
  float v;
  if (mag == 0x7Cu) v = bits_to_float(0x7F800000u);
  else if (mag > 0x7Cu) return quiet_nan();
  else v = decode_magnitude<2, 15>(mag);
  return (code & 0x80u) ? -v : v;
}

// ---- FP16 (IEEE binary16): overflow rounds to inf ----
FP4_HD uint16_t fp16_encode(float x) {
  const uint32_t b = float_to_bits(x), a = b & 0x7FFFFFFFu;
  const uint32_t sign = (b >> 16) & 0x8000u;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7FFFu);
  // kMaxCode = 0x7C00 (inf): everything that rounds past 65504 lands on inf.
  return static_cast<uint16_t>(sign | encode_magnitude_rne_sat<10, 15, 0x7C00u>(a));
}

FP4_HD float fp16_decode(uint16_t h) {
  const uint32_t mag = h & 0x7FFFu;
  float v;
  if (mag == 0x7C00u) v = bits_to_float(0x7F800000u);
  else if (mag > 0x7C00u) return quiet_nan();
  else v = decode_magnitude<10, 15>(mag);
  return (h & 0x8000u) ? -v : v;
}

// ---- BF16: the top half of an fp32, rounded to nearest even ----
FP4_HD uint16_t bf16_encode(float x) {
  const uint32_t b = float_to_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((b >> 16) | 0x7FFFu);
  const uint32_t rounding_bias = 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>((b + rounding_bias) >> 16);
}

FP4_HD float bf16_decode(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

// ---- UE8M0: 2^(code - 127), code 0xFF = NaN, no zero ----
constexpr uint8_t kUE8M0NaN = 0xFF;
constexpr uint8_t kUE8M0MaxCode = 0xFE;

// From the bits: code << 23 is 2^(code - 127) for codes 1 to 254; code 0 is the subnormal 2^-127.
// Branch-free enough for the kernels that decode a scale per block.
FP4_HD float ue8m0_decode(uint8_t code) {
  return code == kUE8M0NaN ? quiet_nan()
                           : bits_to_float(code == 0 ? 0x00400000u : static_cast<uint32_t>(code) << 23);
}

// 1 / ue8m0_decode(code), exact: every 2^(127 - code) for code in [0, 254] is a float.
FP4_HD float ue8m0_inverse(uint8_t code) {
  return code == kUE8M0NaN ? quiet_nan() : exp2_exact(127 - static_cast<int>(code));
}

// Smallest power of two >= |x| (round toward +inf), saturated to 2^127; the scale rule
// cuBLAS and TRT-LLM use for MXFP8 ("RCEIL"). NaN -> 0xFF.
FP4_HD uint8_t ue8m0_encode_ceil(float x) {
  const uint32_t a = float_to_bits(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kUE8M0NaN;
  const uint32_t exp_field = a >> 23, mant = a & 0x7FFFFFu;
  if (exp_field == 0) return mant > 0x400000u ? 1 : 0;  // subnormal: 2^-127 is 0x400000
  const uint32_t code = exp_field + (mant != 0 ? 1u : 0u);
  return static_cast<uint8_t>(code > kUE8M0MaxCode ? kUE8M0MaxCode : code);
}

// Largest power of two <= |x| (round toward zero), saturated; the OCP "floor" rule's primitive.
FP4_HD uint8_t ue8m0_encode_floor(float x) {
  const uint32_t a = float_to_bits(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kUE8M0NaN;
  const uint32_t exp_field = a >> 23;
  if (exp_field == 0) return 0;
  return static_cast<uint8_t>(exp_field > kUE8M0MaxCode ? kUE8M0MaxCode : exp_field);
}

}  // namespace fp4
