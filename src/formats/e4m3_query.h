// The MSA indexer's FP8 query (docs/kernels/indexer.md, "FP8 path"): each head's query vector
// is scaled by the power of two that puts its largest magnitude in [2^7, 2^8), rounded to one
// E4M3 value per element, or to two (hi, then lo: the rounding of what hi left), and read back
// as (hi + lo) x 2^-shift. Two parts keep about 8 significant bits (|x - value| <= 2^-8 |x| in
// E4M3's normal range), one keeps 4. Host and device compute the same bits: the CPU reference
// scores the read-back values, the FP8 tensor-core kernel multiplies the codes.
#pragma once

#include "formats/hd.h"
#include "formats/minifloat.h"

namespace fp4 {

struct E4M3Parts {
  uint8_t hi = 0, lo = 0;
};

// The head's power of two: amax x 2^shift in [2^7, 2^8) (448 is E4M3's largest value, so the
// largest element cannot saturate); 0 when amax is 0, infinite or NaN.
FP4_HD int e4m3_query_shift(float amax) {
  const uint32_t bits = float_to_bits(amax) & 0x7FFFFFFFu;
  if (bits == 0 || bits >= 0x7F800000u) return 0;
  int exponent = static_cast<int>(bits >> 23) - 127;  // amax in [2^exponent, 2^(exponent + 1))
  if (exponent == -127) {                             // subnormal: count the mantissa's leading zeros
    uint32_t m = bits & 0x7FFFFFu;
    exponent = -126;
    while (m < 0x800000u) m <<= 1, --exponent;
  }
  return 7 - exponent;
}

// x times 2^e, exactly where the product is representable: the same one or two multiplies on
// both sides, so even a product that rounds (below FP32's normal range) rounds alike.
FP4_HD float times_pow2(float x, int e) {
  if (e > 127) return x * exp2_exact(127) * exp2_exact(e - 127);
  if (e < -126) return x * exp2_exact(-126) * exp2_exact(e + 126);
  return x * exp2_exact(e);
}

// Element x of a head whose shift is `shift`, in `parts` (1 or 2) E4M3 codes. x x 2^shift is at
// most 2^8 for every element of the head, and x x 2^shift - value(hi) is exact in FP32.
FP4_HD E4M3Parts e4m3_query_encode(float x, int shift, int parts) {
  const float scaled = times_pow2(x, shift);
  E4M3Parts p;
  p.hi = e4m3_encode(scaled);
  if (parts == 2) p.lo = e4m3_encode(scaled - e4m3_decode(p.hi));
  return p;
}

// The value the codes stand for: (hi + lo) x 2^-shift. hi + lo is exact (both parts lie within
// 2^8 and 2^-9, 18 bits apart at most).
FP4_HD float e4m3_query_decode(E4M3Parts p, int shift) {
  return times_pow2(e4m3_decode(p.hi) + e4m3_decode(p.lo), -shift);
}

// One head's query row x[0, n) rounded in place to its `parts` E4M3 codes and read back: the
// scalar form of what the indexer scores (NaN elements do not enter the head's amax).
inline void e4m3_query_round_row(float* x, int64_t n, int parts) {
  float amax = 0.0f;
  for (int64_t e = 0; e < n; ++e) {
    const float a = bits_to_float(float_to_bits(x[e]) & 0x7FFFFFFFu);
    amax = a > amax ? a : amax;
  }
  const int shift = e4m3_query_shift(amax);
  for (int64_t e = 0; e < n; ++e) x[e] = e4m3_query_decode(e4m3_query_encode(x[e], shift, parts), shift);
}

}  // namespace fp4
