// MXFP8 blocks (OCP Microscaling v1.0): 32 consecutive values share one UE8M0 scale 2^(s-127);
// each value is an E4M3 byte.
//
// When we produce MXFP8 we choose the scale that never clips ("RCEIL", as cuBLAS and TRT-LLM):
//   s     = UE8M0_CEIL(amax / 448)              (true division, then round up to 2^k)
//   q_i   = E4M3_RNE_SAT(x_i * 2^(127 - s))     (exact multiply = x_i / 2^(s-127) bit for bit,
//                                                since every 2^(127-s), s in [0, 254], is a float)
//   x^_i  = e4m3(q_i) * 2^(s - 127)             (exact)
// Checkpoints made with the OCP floor rule decode with the same dequantization.
// Policies: an all-zero block gets s = 0 (2^-127); a NaN in the block sets s = 0xFF (NaN).
#pragma once

#include "formats/amax.h"
#include "formats/minifloat.h"

namespace fp4 {

constexpr int kMxfp8BlockElems = 32;
constexpr int kMxfp8BlockScaleBytes = 1;
static_assert(kMxfp8BlockElems * 1 + kMxfp8BlockScaleBytes == 33, "an MXFP8 block is 33 bytes");

FP4_HD uint8_t mxfp8_scale_code(float amax, bool has_nan) {
  return has_nan ? kUE8M0NaN : ue8m0_encode_ceil(amax / kE4M3Max);
}

FP4_HD uint8_t mxfp8_encode_value(float x, float scale_inverse) {
  return e4m3_encode(x * scale_inverse);
}

// NaN codes and NaN scales yield the canonical quiet NaN directly (see nvfp4_decode_value).
FP4_HD float mxfp8_decode_value(uint8_t code, float scale_value) {
  const float v = e4m3_decode(code);
  return is_nan(v) || is_nan(scale_value) ? quiet_nan() : v * scale_value;
}

// Quantizes x[0..31] into 32 E4M3 bytes; returns the UE8M0 scale code.
FP4_HD uint8_t mxfp8_quantize_block(const float* x, uint8_t* values) {
  float amax = 0.0f;
  bool has_nan = false;
  for (int i = 0; i < kMxfp8BlockElems; ++i) accumulate_amax(x[i], amax, has_nan);
  const uint8_t scale = mxfp8_scale_code(amax, has_nan);
  const float inverse = ue8m0_inverse(scale);
  for (int i = 0; i < kMxfp8BlockElems; ++i) values[i] = mxfp8_encode_value(x[i], inverse);
  return scale;
}

FP4_HD void mxfp8_dequantize_block(const uint8_t* values, uint8_t scale, float* out) {
  const float s = ue8m0_decode(scale);
  for (int i = 0; i < kMxfp8BlockElems; ++i) out[i] = mxfp8_decode_value(values[i], s);
}

// The E4M3 code of y when y is exactly an E4M3 value, else -1: read from y's bits, no rounding
// (the loader checks every value of a checkpoint's MXFP8 projections, billions of them). A
// normal E4M3 (2^-6 <= |y| <= 448) keeps 3 fraction bits of y's 23; a subnormal one is a
// multiple of 2^-9 below 2^-6.
FP4_HD int e4m3_exact_code(float y) {
  const uint32_t bits = float_to_bits(y), a = bits & 0x7FFFFFFFu, sign = (bits >> 24) & 0x80u;
  if (a == 0) return static_cast<int>(sign);
  const int e = static_cast<int>(a >> 23) - 127;
  if (e >= -6 && e <= 8) {
    if ((a & 0xFFFFFu) != 0 || a > 0x43E00000u) return -1;  // more than 3 fraction bits, or > 448
    return static_cast<int>(sign | (static_cast<uint32_t>(e + 7) << 3) | ((a >> 20) & 7u));
  }
  if (e >= -9 && e < -6) {
    const int drop = 23 - (e + 9);  // y 2^9 = (1.f) 2^(e + 9) must be a whole number
    if ((a & ((1u << drop) - 1)) != 0) return -1;
    return static_cast<int>(sign | ((0x800000u | (a & 0x7FFFFFu)) >> drop));
  }
  return -1;
}

// Whether x[0..31] is exactly an MXFP8 block, as the values a checkpoint's MXFP8 tensor decodes
// to are; if so, writes a block that decodes to every x bit for bit (signed zeros included)
// and its scale. The checkpoint may have chosen another scale: any scale that holds the block
// exactly would do, and when one does, the ceiling scale does too (halving the scale doubles
// every code, which stays within E4M3 while |code| <= 224, and the ceiling scale is the
// smallest that keeps amax within 448). The scale above it is tried as well, in case the FP32
// division amax / 448 rounded below a power of two. NaN and infinity are never exact.
FP4_HD bool mxfp8_quantize_block_exact(const float* x, uint8_t* values, uint8_t& scale) {
  float amax = 0.0f;
  bool has_nan = false;
  for (int i = 0; i < kMxfp8BlockElems; ++i) {
    if ((float_to_bits(x[i]) & 0x7FFFFFFFu) >= 0x7F800000u) return false;  // NaN or infinity
    accumulate_amax(x[i], amax, has_nan);
  }
  const uint8_t ceiling = mxfp8_scale_code(amax, false);
  for (int step = 0; step < 2; ++step) {
    const uint8_t s = static_cast<uint8_t>(ceiling + step);
    if (s == kUE8M0NaN) return false;
    // A code found means x / scale was a normal float or zero (E4M3 values lie far above FP32's
    // subnormals), so the division was exact and code times scale is x again.
    const float inverse = ue8m0_inverse(s);
    bool exact = true;
    for (int i = 0; i < kMxfp8BlockElems && exact; ++i) {
      const int code = e4m3_exact_code(x[i] * inverse);
      exact = code >= 0;
      values[i] = static_cast<uint8_t>(code);
    }
    if (exact) {
      scale = s;
      return true;
    }
  }
  return false;
}

// Row-major [rows, cols]: values [rows, cols] E4M3, scales [rows, cols/32] UE8M0.
constexpr int64_t mxfp8_value_bytes(int64_t rows, int64_t cols) { return rows * cols; }
constexpr int64_t mxfp8_scale_bytes(int64_t rows, int64_t cols) {
  return rows * cols / kMxfp8BlockElems;
}

}  // namespace fp4
