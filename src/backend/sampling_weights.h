// The fixed-point token weights every sampling decision is made on (sampling/sampler.h, step 3):
//
//   token_weight(x, m) = floor(weight_exp(double(x) - double(m)) * 2^40)   when x - m >= -27.8
//                      = 0                                                   otherwise
//
// weight_exp is written out below rather than taken from a math library, so that the CUDA
// sampler, evaluating the same IEEE double operations in the same order (no FMA contraction),
// gets the same weights bit for bit and therefore the same tokens. It is Cody-Waite range
// reduction d = k ln2 + r, |r| <= ln2/2 (k rounded to nearest even by the 1.5 * 2^52 shifter),
// then Taylor's series to degree 11 in Horner form, then an exact scaling by 2^k. On
// [-27.8, 0] its relative error is below 1e-14 (the series remainder |r|^12/12! * e^|r| <=
// 8.9e-15 plus a few roundings), so a weight is within 0.011 of exp(d) * 2^40.
//
// Why integers: sums of weights are exact and the same in any order, so top-p and the draw
// do not depend on how a parallel reduction groups them. Why 2^40: a row of up to 2^23 tokens
// sums below 2^63; a token 27.7 or more below the best weighs 0 (probability < 1e-12 with
// temperature 1) and is never drawn.
//
// Host and device code: it lives in backend/ so that the CUDA sampler (backend/cuda/sampler.cu)
// can include it, and sampling/sampler.cpp includes it from here.
#pragma once

#include <bit>
#include <cstdint>

#include "formats/hd.h"

namespace fp4::sampling {

inline constexpr int kWeightFractionBits = 40;
inline constexpr double kWeightOne = 0x1p40;  // the weight of the best token
// exp(d) * 2^40 < 1 once d < ln(2^-40) = -27.73: weights below this are 0 without evaluation.
inline constexpr double kZeroWeightBelow = -27.8;
inline constexpr int64_t kMaxVocab = int64_t{1} << 23;

// e^d for d in [kZeroWeightBelow, 0]; the operations are the definition.
FP4_HD double weight_exp(double d) {
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3FE62E42FEE00000: k * hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln2 - hi
  constexpr double kShifter = 0x1.8p52;                   // adding it rounds to an integer
  const double k = (d * kLog2e + kShifter) - kShifter;
  const double r = (d - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 39916800.0;  // 1/11!
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // 2^k built from its exponent bits; k is in [-41, 0] here, so 2^k is a normal double.
  const uint64_t exponent = static_cast<uint64_t>(static_cast<int64_t>(k) + 1023) << 52;
#if defined(__CUDA_ARCH__)
  return p * __longlong_as_double(static_cast<long long>(exponent));  // std::bit_cast is host-only
#else
  return p * std::bit_cast<double>(exponent);
#endif
}

FP4_HD uint64_t token_weight(float x, float max_x) {
  const double d = static_cast<double>(x) - static_cast<double>(max_x);
  if (!(d >= kZeroWeightBelow)) return 0;  // also x = -inf
  // The product is in [0, 2^40 * 1.0000000000001], and the conversion truncates: floor.
  return static_cast<uint64_t>(weight_exp(d) * kWeightOne);
}

}  // namespace fp4::sampling
