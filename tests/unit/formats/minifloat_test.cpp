// Hand-checked values of the scalar codecs, from the format definitions (docs/formats/): the
// E2M1 table, rounding ties, saturation and the special values. The exhaustive comparison with
// the CUDA toolkit is in toolkit_agreement_test.cpp.
#include "formats/minifloat.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace fp4 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(E2M1, DecodesTheSixteenCodes) {
  const float expected[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1_decode(static_cast<uint8_t>(c)), expected[c]) << c;
  EXPECT_TRUE(std::signbit(e2m1_decode(0x8)));
}

TEST(E2M1, RoundsTiesToEvenAndSaturates) {
  // Midpoints between neighbouring values go to the code with an even mantissa bit.
  EXPECT_EQ(e2m1_encode(0.25f), 0x0);
  EXPECT_EQ(e2m1_encode(0.2500001f), 0x1);
  EXPECT_EQ(e2m1_encode(0.75f), 0x2);
  EXPECT_EQ(e2m1_encode(1.25f), 0x2);
  EXPECT_EQ(e2m1_encode(1.75f), 0x4);
  EXPECT_EQ(e2m1_encode(2.5f), 0x4);
  EXPECT_EQ(e2m1_encode(3.5f), 0x6);
  EXPECT_EQ(e2m1_encode(5.0f), 0x6);
  EXPECT_EQ(e2m1_encode(5.0001f), 0x7);
  EXPECT_EQ(e2m1_encode(1e30f), 0x7);
  EXPECT_EQ(e2m1_encode(kInf), 0x7);
  EXPECT_EQ(e2m1_encode(-kInf), 0xF);
  EXPECT_EQ(e2m1_encode(-3.0f), 0xD);
  EXPECT_EQ(e2m1_encode(-0.0f), 0x8);
  EXPECT_EQ(e2m1_encode(std::numeric_limits<float>::quiet_NaN()), 0x7);
}

TEST(E4M3, RangeTiesAndSpecials) {
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0x01), 0.001953125f);  // 2^-9, smallest subnormal
  EXPECT_EQ(e4m3_decode(0x08), 0.015625f);     // 2^-6, smallest normal
  EXPECT_TRUE(is_nan(e4m3_decode(0x7F)));
  EXPECT_TRUE(is_nan(e4m3_decode(0xFF)));
  EXPECT_EQ(e4m3_encode(448.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(464.0f), 0x7E);  // the midpoint to the (absent) 480 ties to even
  EXPECT_EQ(e4m3_encode(1e9f), 0x7E);
  EXPECT_EQ(e4m3_encode(-kInf), 0xFE);
  EXPECT_EQ(e4m3_encode(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(e4m3_encode(0.0009765625f), 0x00);  // 2^-10: half the smallest subnormal ties to 0
  EXPECT_EQ(e4m3_encode(0.0009766f), 0x01);
  EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
  for (int c = 0; c < 0x7F; ++c) EXPECT_EQ(e4m3_encode(e4m3_decode(static_cast<uint8_t>(c))), c);
}

TEST(E5M2, RangeAndSpecials) {
  EXPECT_EQ(e5m2_decode(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_decode(0x7C), kInf);
  EXPECT_TRUE(is_nan(e5m2_decode(0x7D)));
  EXPECT_EQ(e5m2_encode(kInf), 0x7B);  // satfinite
  for (int c = 0; c < 0x7C; ++c) EXPECT_EQ(e5m2_encode(e5m2_decode(static_cast<uint8_t>(c))), c);
}

TEST(UE8M0, PowersOfTwo) {
  EXPECT_EQ(ue8m0_decode(127), 1.0f);
  EXPECT_EQ(ue8m0_decode(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(ue8m0_decode(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(is_nan(ue8m0_decode(255)));
  for (int c = 0; c < 255; ++c) {
    EXPECT_EQ(ue8m0_decode(static_cast<uint8_t>(c)), std::ldexp(1.0f, c - 127)) << c;
    EXPECT_EQ(ue8m0_decode(static_cast<uint8_t>(c)) * ue8m0_inverse(static_cast<uint8_t>(c)), 1.0f) << c;
    EXPECT_EQ(ue8m0_encode_ceil(ue8m0_decode(static_cast<uint8_t>(c))), c);
  }
  EXPECT_EQ(ue8m0_encode_ceil(1.5f), 128);  // up to 2
  EXPECT_EQ(ue8m0_encode_floor(1.5f), 127);  // down to 1
}

TEST(BF16AndFP16, RoundToNearestEven) {
  EXPECT_EQ(bf16_encode(1.0f), 0x3F80);
  EXPECT_EQ(bf16_encode(bits_to_float(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(bf16_encode(bits_to_float(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(fp16_encode(65504.0f), 0x7BFF);
  EXPECT_EQ(fp16_encode(65520.0f), 0x7C00);  // rounds to inf
  EXPECT_EQ(fp16_decode(0x0001), std::ldexp(1.0f, -24));
}

}  // namespace
}  // namespace fp4
