// The indexer's FP8 query codec (formats/e4m3_query.h), bit for bit: the per-head power of two,
// the hi / lo codes against e4m3_encode of the scaled value and of what hi left, the read-back
// value exact in FP32, and the rounding error the indexer's docs state (2^-4 |x| for one part,
// 2^-8 |x| for two, in E4M3's normal range; half of E4M3's subnormal spacing below it).
#include "formats/e4m3_query.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace fp4 {
namespace {

TEST(E4M3Query, ShiftPutsTheLargestMagnitudeInItsBinade) {
  std::mt19937_64 rng(41);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int exponent = -149; exponent <= 127; ++exponent) {
    const float amax = exponent >= -126 ? std::ldexp(mantissa(rng), exponent) : std::ldexp(1.0f, exponent);
    if (!std::isfinite(amax)) continue;
    const int shift = e4m3_query_shift(amax);
    const double scaled = std::ldexp(double{amax}, shift);
    EXPECT_GE(scaled, 128.0) << amax;
    EXPECT_LT(scaled, 256.0) << amax;
    EXPECT_EQ(times_pow2(amax, shift), static_cast<float>(scaled)) << amax;
  }
  EXPECT_EQ(e4m3_query_shift(0.0f), 0);
  EXPECT_EQ(e4m3_query_shift(std::numeric_limits<float>::infinity()), 0);
  EXPECT_EQ(e4m3_query_shift(std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(e4m3_query_shift(std::ldexp(1.0f, -149)), 156);  // the smallest subnormal
  EXPECT_EQ(e4m3_query_shift(1.0f), 7);
  EXPECT_EQ(e4m3_query_shift(255.0f), 0);
  EXPECT_EQ(e4m3_query_shift(256.0f), -1);
}

TEST(E4M3Query, PartsAreTheRoundingsOfTheValueAndOfWhatHiLeft) {
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(normal(rng), static_cast<int>(rng() % 60) - 30);
    const float amax = std::abs(x) * std::ldexp(1.0f, static_cast<int>(rng() % 12));  // x is not always the largest
    const int shift = e4m3_query_shift(amax);
    const float scaled = times_pow2(x, shift);
    const E4M3Parts one = e4m3_query_encode(x, shift, 1), two = e4m3_query_encode(x, shift, 2);
    ASSERT_EQ(one.hi, e4m3_encode(scaled));
    ASSERT_EQ(one.lo, 0);
    ASSERT_EQ(two.hi, one.hi);
    const double left = double{scaled} - e4m3_decode(two.hi);
    ASSERT_EQ(static_cast<double>(static_cast<float>(left)), left) << "x - hi is exact";
    ASSERT_EQ(two.lo, e4m3_encode(static_cast<float>(left)));
    // The read-back value is exact: hi + lo in double, scaled back, equals the float.
    const double value = std::ldexp(double{e4m3_decode(two.hi)} + e4m3_decode(two.lo), -shift);
    ASSERT_EQ(double{e4m3_query_decode(two, shift)}, value) << x;
    // Rounding error, in the scaled units: half an ulp of E4M3 (2^-4 relative in its normal
    // range, at least 2^-6) or half its subnormal spacing, 2^-10.
    const double err1 = std::abs(double{scaled} - e4m3_decode(one.hi));
    const double err2 = std::abs(double{scaled} - (double{e4m3_decode(two.hi)} + e4m3_decode(two.lo)));
    ASSERT_LE(err1, std::max(0x1p-4 * std::abs(scaled), 0x1p-10)) << x;
    ASSERT_LE(err2, std::max(0x1p-8 * std::abs(scaled), 0x1p-10)) << x;
  }
}

TEST(E4M3Query, RepresentableValuesRoundTripWithNoLowPart) {
  // Every finite E4M3 value of a head whose largest magnitude is 2^7 comes back exactly.
  const int shift = e4m3_query_shift(128.0f);
  ASSERT_EQ(shift, 0);
  for (int code = 0; code < 256; ++code) {
    const float v = e4m3_decode(static_cast<uint8_t>(code));
    if (std::isnan(v) || std::abs(v) > 256.0f) continue;
    const E4M3Parts p = e4m3_query_encode(v, shift, 2);
    EXPECT_EQ(p.lo & 0x7F, 0) << code;
    EXPECT_EQ(e4m3_query_decode(p, shift), v) << code;
  }
  // Small integers with the head's shift: 3 x 2^6 = 192 is representable.
  for (float v : {-3.0f, -2.0f, -1.0f, 1.0f, 2.0f, 3.0f}) {
    EXPECT_EQ(e4m3_query_decode(e4m3_query_encode(v, e4m3_query_shift(3.0f), 1), e4m3_query_shift(3.0f)), v);
  }
}

TEST(E4M3Query, RowRoundingTakesTheRowsAmaxAndSkipsNaN) {
  std::mt19937_64 rng(43);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(96);
  for (float& x : row) x = normal(rng);
  row[17] = std::numeric_limits<float>::quiet_NaN();
  float amax = 0.0f;
  for (float x : row) amax = std::isnan(x) ? amax : std::max(amax, std::abs(x));
  const int shift = e4m3_query_shift(amax);
  for (int parts : {1, 2}) {
    std::vector<float> rounded = row;
    e4m3_query_round_row(rounded.data(), static_cast<int64_t>(rounded.size()), parts);
    for (size_t e = 0; e < row.size(); ++e) {
      const float want = e4m3_query_decode(e4m3_query_encode(row[e], shift, parts), shift);
      if (std::isnan(want)) EXPECT_TRUE(std::isnan(rounded[e])) << e;
      else EXPECT_EQ(rounded[e], want) << e << " parts " << parts;
    }
  }
}

TEST(E4M3Query, NaNStaysNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const E4M3Parts p = e4m3_query_encode(nan, 3, 2);
  EXPECT_EQ(p.hi, kE4M3NaN);
  EXPECT_TRUE(std::isnan(e4m3_query_decode(p, 3)));
}

}  // namespace
}  // namespace fp4
