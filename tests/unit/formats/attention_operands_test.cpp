// Attention's 16-bit operands (formats/attention_operands.h), bit for bit: the FP16 query
// head's power of two, the rounded head against fp16_encode of each scaled value, and the
// rounding error the attention docs state (2^-11 |x| in FP16's normal range, 2^-8 |x| for BF16).
#include "formats/attention_operands.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace fp4 {
namespace {

TEST(AttentionOperands, F16ShiftPutsTheLargestMagnitudeInItsBinadeUpToTheCap) {
  std::mt19937_64 rng(43);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int exponent = -149; exponent <= 127; ++exponent) {
    const float amax = exponent >= -126 ? std::ldexp(mantissa(rng), exponent) : std::ldexp(1.0f, exponent);
    if (!std::isfinite(amax)) continue;
    const int shift = f16_query_shift(amax);
    const double scaled = std::ldexp(double{amax}, shift);
    if (exponent >= 13 - 126) {
      EXPECT_GE(scaled, 8192.0) << amax;
      EXPECT_LT(scaled, 16384.0) << amax;
    } else {
      EXPECT_EQ(shift, 126) << amax;  // 2^-126 must stay a normal float
    }
  }
  EXPECT_EQ(f16_query_shift(0.0f), 0);
  EXPECT_EQ(f16_query_shift(std::numeric_limits<float>::infinity()), 0);
  EXPECT_EQ(f16_query_shift(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(f16_query_shift(1.0f), 13);
  EXPECT_EQ(f16_query_shift(16383.0f), 0);
  EXPECT_EQ(f16_query_shift(16384.0f), -1);
}

TEST(AttentionOperands, RoundedHeadIsTheFp16OfEachScaledValueScaledBack) {
  std::mt19937_64 rng(44);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> log2_range(-40, 40);
  for (int trial = 0; trial < 200; ++trial) {
    const float range = std::ldexp(1.0f, log2_range(rng));
    std::vector<float> head(128);
    for (float& x : head) x = normal(rng) * range;
    if (trial % 10 == 0) head[trial % 128] = std::numeric_limits<float>::quiet_NaN();  // not in amax
    float amax = 0.0f;
    for (float x : head) amax = std::isnan(x) ? amax : std::max(amax, std::abs(x));
    const int shift = f16_query_shift(amax);
    std::vector<float> rounded = head;
    round_query_row_16bit(rounded.data(), 128, true);
    int changed = 0;
    for (size_t e = 0; e < head.size(); ++e) {
      const float x = head[e];
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(rounded[e]));
        continue;
      }
      const uint16_t code = fp16_encode(std::ldexp(x, shift));
      EXPECT_EQ(rounded[e], std::ldexp(fp16_decode(code), -shift)) << x;
      // FP16's normal range ([2^-14, 2^16) scaled): 2^-11 relative; below it half the
      // subnormal spacing 2^-24, i.e. 2^-25 of the scaled units.
      const double err = std::abs(double{rounded[e]} - x);
      EXPECT_LE(err, std::max(std::ldexp(std::abs(double{x}), -11), std::ldexp(1.0, -25 - shift))) << x;
      changed += rounded[e] != x;
    }
    EXPECT_GT(changed, 0) << "Gaussian heads must round";
  }
}

TEST(AttentionOperands, Bf16HeadsAndWeightsRoundToNearestEven) {
  std::mt19937_64 rng(45);
  std::normal_distribution<float> normal;
  std::vector<float> head(64);
  for (float& x : head) x = normal(rng) * 1e-20f;
  std::vector<float> rounded = head;
  round_query_row_16bit(rounded.data(), 64, false);
  for (size_t e = 0; e < head.size(); ++e) {
    EXPECT_EQ(rounded[e], bf16_decode(bf16_encode(head[e])));
    EXPECT_LE(std::abs(double{rounded[e]} - head[e]), std::ldexp(std::abs(double{head[e]}), -8));
  }
  // Weights: FP16 keeps its subnormals (2^-24 spacing), BF16 FP32's range.
  EXPECT_EQ(round_to_16bit(0x1.8p-24f, true), 0x1p-23f);   // a tie, to even
  EXPECT_EQ(round_to_16bit(0x1.4p-24f, true), 0x1p-24f);
  EXPECT_EQ(round_to_16bit(0x1.0101p-100f, false), 0x1.02p-100f);
  EXPECT_EQ(round_to_16bit(1.0f + 0x1p-11f, true), 1.0f);  // a tie, to even
  EXPECT_EQ(round_to_16bit(1.0f + 0x1.8p-10f, true), 1.0f + 0x1p-9f);
}

}  // namespace
}  // namespace fp4
