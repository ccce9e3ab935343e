// Attention's 16-bit operands (docs/kernels/attention_decode.md, "16-bit operands"): Q and the
// softmax weights rounded to the 16-bit type the page format multiplies in, FP16 for FP8 and
// NVFP4 pages (whose values are exact in FP16), BF16 for BF16 and FP32 pages. An FP16 query head
// is first scaled by the power of two that puts its largest magnitude in [2^13, 2^14), so it
// keeps FP16's 11 significant bits whatever its range, and scaled back after the product. Host
// and device compute the same bits: the CPU reference multiplies the rounded values, the
// kernels the codes.
#pragma once

#include <cstdint>

#include "formats/e4m3_query.h"
#include "formats/minifloat.h"

namespace fp4 {

// The head's power of two: amax x 2^shift in [2^13, 2^14), capped at 2^126 so that 2^-shift
// stays a normal float (a head of subnormals then keeps fewer bits); 0 when amax is 0, infinite
// or NaN.
FP4_HD int f16_query_shift(float amax) {
  const uint32_t bits = float_to_bits(amax) & 0x7FFFFFFFu;
  if (bits == 0 || bits >= 0x7F800000u) return 0;
  const int shift = e4m3_query_shift(amax) + 6;  // e4m3_query_shift puts amax in [2^7, 2^8)
  return shift < 126 ? shift : 126;
}

// x rounded to FP16 (ties to even, subnormals kept) or BF16, read back.
FP4_HD float round_to_f16(float x) { return fp16_decode(fp16_encode(x)); }
FP4_HD float round_to_bf16(float x) { return bf16_decode(bf16_encode(x)); }
FP4_HD float round_to_16bit(float x, bool f16) { return f16 ? round_to_f16(x) : round_to_bf16(x); }

// One query head x[0, n) rounded in place as the 16-bit operands take it: BF16 as is, FP16
// after the head's shift (NaN elements do not enter the head's amax).
inline void round_query_row_16bit(float* x, int64_t n, bool f16) {
  if (!f16) {
    for (int64_t e = 0; e < n; ++e) x[e] = round_to_bf16(x[e]);
    return;
  }
  float amax = 0.0f;
  for (int64_t e = 0; e < n; ++e) {
    const float a = bits_to_float(float_to_bits(x[e]) & 0x7FFFFFFFu);
    amax = a > amax ? a : amax;
  }
  const int shift = f16_query_shift(amax);
  for (int64_t e = 0; e < n; ++e) x[e] = times_pow2(round_to_f16(times_pow2(x[e], shift)), -shift);
}

}  // namespace fp4
