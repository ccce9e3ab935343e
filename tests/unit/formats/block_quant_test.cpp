// NVFP4 and MXFP8 blocks: (1) every code the quantizer picks is checked by brute force against
// all candidates of the format (nearest, ties to even), independently of the bit arithmetic;
// (2) round-trip error statistics on Gaussian and heavy-tailed data sit where the format puts
// them; (3) edge cases follow the documented policies; (4) the CPU backend applies the block
// functions row by row with strides.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "backend/cpu/quantize.h"
#include "core/check.h"
#include "formats/mxfp8.h"
#include "formats/nvfp4.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

using testing::Distribution;

// Index of the candidate nearest to v; on a tie, the one with an even code (even mantissa).
template <typename Decode>
int nearest_code(double v, int num_codes, Decode decode) {
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c < num_codes; ++c) {
    const double err = std::fabs(static_cast<double>(decode(c)) - v);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(x[i]) * x[i];
  }
  return std::sqrt(num / den);
}

float amax_of(const std::vector<float>& x) {
  float m = 0;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

TEST(Nvfp4Block, CodesAreNearestCandidates) {
  auto rng = testing::seeded_rng(11);
  std::uniform_real_distribution<float> log_g(-10.0f, 3.0f);
  for (int trial = 0; trial < 4000; ++trial) {
    const auto x = testing::random_floats(16, Distribution::kBlockScaled, rng);
    const float g = trial % 2 ? std::exp2(log_g(rng)) : 1.0f;
    uint8_t packed[8];
    const uint8_t sf = nvfp4_quantize_block(x.data(), g, packed);
    // Scale: nearest positive E4M3 (codes 0..126) to amax / (6g), saturating at 448.
    const float target = amax_of(x) / (6.0f * g);
    const int want_sf = target >= 448.0f ? 0x7E : nearest_code(target, 0x7F, [](int c) { return e4m3_decode(uint8_t(c)); });
    ASSERT_EQ(sf, want_sf) << "trial " << trial;
    const float denom = e4m3_decode(sf) * g;
    for (int i = 0; i < 16; ++i) {
      const uint8_t code = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
      if (denom == 0.0f) {
        ASSERT_EQ(code, 0);
        continue;
      }
      const float q = x[i] * (1.0f / denom);  // the documented order: one reciprocal per block
      const int mag = std::fabs(q) >= 6.0f ? 7 : nearest_code(std::fabs(q), 8, [](int c) { return e2m1_decode(uint8_t(c)); });
      ASSERT_EQ(code & 7, mag) << "trial " << trial << " element " << i << " q=" << q;
      ASSERT_EQ(code >> 3, std::signbit(q) ? 1 : 0);
    }
  }
}

// The kernels' grid rounding must give nvfp4_encode_value's code for every x and every
// reciprocal in range, in both forms: plain, and with the reciprocal scaled by 2^-6 as the
// kernel calls it. Random pairs over the whole fast range, plus the hard cases: products at
// and up to three ulps around each E2M1 rounding midpoint and the grid's region boundaries.
TEST(Nvfp4Block, GridRoundingMatchesEncoder) {
  auto rng = testing::seeded_rng(15);
  std::uniform_real_distribution<float> log_d(-96.0f, 90.0f), unit(-8.5f, 8.5f);
  const float pivots[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.0f, 2.5f, 3.5f, 4.0f, 5.0f, 6.0f, 8.0f};
  int64_t checked = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const float d = std::clamp(std::exp2(log_d(rng)) * (1.0f + unit(rng) / 17.0f),
                               kFastDivisorMin / 64.0f, kFastDivisorMax);
    const float r = nvfp4_value_reciprocal(d), d64 = d * 64.0f, r64 = 1.0f / d64;
    const bool plain = nvfp4_fast_divisor(d), scaled = nvfp4_fast_divisor(d64);
    ASSERT_TRUE(plain || scaled) << d;
    auto check = [&](float x) {
      const uint8_t want = nvfp4_encode_value(x, r);
      if (plain) ASSERT_EQ(e2m1_encode(nvfp4_round_to_grid(x, r)), want) << "x=" << x << " d=" << d;
      // The kernel's form: the reciprocal of 64 d, the result times 2^-6.
      if (scaled)
        ASSERT_EQ(e2m1_encode(nvfp4_round_to_grid<-6>(x, r64) * 64.0f), want)
            << "x=" << x << " d=" << d << " (scaled by 2^-6)";
      ++checked;
    };
    for (int i = 0; i < 50; ++i) check(unit(rng) * d);
    for (float t : pivots) {
      for (float sign : {1.0f, -1.0f}) {
        float x = sign * t / r;  // x * r lands at or next to the pivot
        for (int k = 0; k < 3; ++k) x = std::nextafter(x, 0.0f);
        for (int k = 0; k < 7; ++k, x = std::nextafter(x, sign * INFINITY)) check(x);
      }
    }
    if (HasFatalFailure()) return;
  }
  // Overflowing and vanishing products at both ends of the divisor range.
  for (float d : {kFastDivisorMin, 1e-20f, 3.0f, 1e20f, kFastDivisorMax / 64.0f})
    for (float special : {0.0f, -0.0f, INFINITY, -INFINITY, 3e38f, -3e38f, 1e-38f, -1e-38f, 1e-45f, -1e-45f}) {
      const float r = nvfp4_value_reciprocal(d);
      EXPECT_EQ(e2m1_encode(nvfp4_round_to_grid(special, r)), nvfp4_encode_value(special, r))
          << special << " / " << d;
      EXPECT_EQ(e2m1_encode(nvfp4_round_to_grid<-6>(special, 1.0f / (d * 64.0f)) * 64.0f),
                nvfp4_encode_value(special, r)) << special << " / " << d << " (scaled)";
    }
  RecordProperty("pairs_checked", std::to_string(checked));
}

TEST(Mxfp8Block, ScaleNeverClipsAndValuesAreNearest) {
  auto rng = testing::seeded_rng(12);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto x = testing::random_floats(32, Distribution::kBlockScaled, rng);
    uint8_t values[32];
    const uint8_t s = mxfp8_quantize_block(x.data(), values);
    const float target = amax_of(x) / 448.0f;
    ASSERT_GE(ue8m0_decode(s), target);      // the smallest power of two that does not clip ...
    ASSERT_LT(ue8m0_decode(s - 1), target);  // ... and no smaller one would do
    for (int i = 0; i < 32; ++i) {
      const double q = double(x[i]) / ue8m0_decode(s);
      const int mag = nearest_code(std::fabs(q), 0x7F, [](int c) { return e4m3_decode(uint8_t(c)); });
      ASSERT_EQ(values[i] & 0x7F, mag) << "trial " << trial << " element " << i;
    }
  }
}

// Round-trip error through the CPU backend, tensor-level, with the ModelOpt global scale.
double nvfp4_round_trip_error(const std::vector<float>& x, bool with_global_scale) {
  const int64_t cols = 1024, rows = static_cast<int64_t>(x.size()) / cols;
  const float g = with_global_scale ? nvfp4_global_scale_for_amax(amax_of(x)) : 1.0f;
  std::vector<uint8_t> codes(x.size() / 2), scales(x.size() / 16);
  std::vector<float> y(x.size());
  cpu::quantize(BlockFormat::kNvfp4, {x.data(), DType::kF32, rows, cols, cols, codes.data(), scales.data(), g});
  cpu::dequantize(BlockFormat::kNvfp4, {codes.data(), scales.data(), g, rows, cols, y.data(), DType::kF32, cols});
  return rel_rms(x, y);
}

double mxfp8_round_trip_error(const std::vector<float>& x) {
  const int64_t cols = 1024, rows = static_cast<int64_t>(x.size()) / cols;
  std::vector<uint8_t> values(x.size()), scales(x.size() / 32);
  std::vector<float> y(x.size());
  cpu::quantize(BlockFormat::kMxfp8, {x.data(), DType::kF32, rows, cols, cols, values.data(), scales.data(), 1.0f});
  cpu::dequantize(BlockFormat::kMxfp8, {values.data(), scales.data(), 1.0f, rows, cols, y.data(), DType::kF32, cols});
  return rel_rms(x, y);
}

// Expected values were measured on 2^22 samples with the same recipe (nvfp4 spec, 1.8):
// NVFP4 0.0951 on N(0,1), 0.0881 on Student-t(3); MXFP8 (RCEIL) 0.0266 and 0.0264. With 2^20
// samples the estimate's standard error is below 0.5% of the value (the per-element squared
// error has a coefficient of variation of about 2 -> 2/sqrt(2^20)/2 = 0.1%), so a +-5% band is
// over ten standard errors wide and still catches any change to the rounding or scale rule
// (the next-worse scale rules of 1.8 move the error by 20% or more, e.g. MXFP8 floor: +10%).
// Student-t(3) has no finite fourth moment, so the relative RMS of a sample has no such bound:
// over 200 fresh seeds it strayed up to 11% from its mean. Its sample is therefore fixed
// (seed 1, any seed would do); the Gaussian one stays fresh.
TEST(RoundTrip, ErrorStatisticsMatchTheFormat) {
  auto rng = testing::seeded_rng(13);
  const size_t n = size_t{1} << 20;
  const auto gauss = testing::random_floats(n, Distribution::kGaussian, rng);
  std::mt19937_64 fixed_rng(1);
  const auto heavy = testing::random_floats(n, Distribution::kStudentT3, fixed_rng);
  EXPECT_NEAR(nvfp4_round_trip_error(gauss, true), 0.0951, 0.0951 * 0.05);
  EXPECT_NEAR(nvfp4_round_trip_error(gauss, false), 0.0951, 0.0951 * 0.05);
  EXPECT_NEAR(nvfp4_round_trip_error(heavy, true), 0.0881, 0.0881 * 0.05);
  EXPECT_NEAR(mxfp8_round_trip_error(gauss), 0.0266, 0.0266 * 0.05);
  EXPECT_NEAR(mxfp8_round_trip_error(heavy), 0.0264, 0.0264 * 0.05);
}

std::vector<float> nvfp4_round_trip_block(std::vector<float> x, float g, uint8_t* scale_out = nullptr) {
  uint8_t packed[8];
  const uint8_t sf = nvfp4_quantize_block(x.data(), g, packed);
  if (scale_out) *scale_out = sf;
  std::vector<float> y(16);
  nvfp4_dequantize_block(packed, sf, g, y.data());
  return y;
}

TEST(Nvfp4Block, EdgeCases) {
  // All zeros: scale 0, everything dequantizes to +0.
  uint8_t sf;
  for (float v : nvfp4_round_trip_block(std::vector<float>(16, 0.0f), 1.0f, &sf)) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(sf, 0);

  // One huge value: it sets the scale (1000/6 -> E4M3 160) and lands on 6*160 = 960; values
  // below a quarter of the scale (40) flush to zero.
  std::vector<float> x(16, 1.0f);
  x[5] = 1000.0f;
  auto y = nvfp4_round_trip_block(x, 1.0f, &sf);
  EXPECT_EQ(e4m3_decode(sf), 160.0f);
  EXPECT_EQ(y[5], 960.0f);
  EXPECT_EQ(y[0], 0.0f);

  // Beyond 6 * 448 * g everything saturates to exactly that.
  const float g = 0.5f;
  x.assign(16, 1e6f);
  x[3] = -std::numeric_limits<float>::infinity();
  y = nvfp4_round_trip_block(x, g);
  EXPECT_EQ(y[0], 6.0f * 448.0f * g);
  EXPECT_EQ(y[3], -6.0f * 448.0f * g);

  // NaN anywhere poisons the scale: the whole block reads back as NaN.
  x.assign(16, 1.0f);
  x[9] = std::numeric_limits<float>::quiet_NaN();
  y = nvfp4_round_trip_block(x, 1.0f, &sf);
  EXPECT_EQ(sf, kE4M3NaN);
  for (float v : y) EXPECT_TRUE(std::isnan(v));

  // Smallest scales: amax = 6 * 2^-9 uses the smallest E4M3 subnormal exactly ...
  x.assign(16, 0.0f);
  x[0] = 6.0f * std::ldexp(1.0f, -9);
  x[1] = -std::ldexp(1.0f, -9);
  y = nvfp4_round_trip_block(x, 1.0f, &sf);
  EXPECT_EQ(sf, 0x01);
  EXPECT_EQ(y[0], x[0]);
  EXPECT_EQ(y[1], -std::ldexp(1.0f, -9));
  // ... and amax/6 at or below 2^-10 (half of it, a tie to even) rounds the scale to 0.
  x[0] = 6.0f * std::ldexp(1.0f, -10);
  x[1] = 0.0f;
  y = nvfp4_round_trip_block(x, 1.0f, &sf);
  EXPECT_EQ(sf, 0);
  EXPECT_EQ(y[0], 0.0f);

  // -0.0 keeps its sign code (0x8) and dequantizes to -0.0.
  x.assign(16, 1.0f);
  x[2] = -0.0f;
  uint8_t packed[8];
  nvfp4_quantize_block(x.data(), 1.0f, packed);
  EXPECT_EQ(packed[1] & 0xF, 0x8);
  y = nvfp4_round_trip_block(x, 1.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_TRUE(std::signbit(y[2]));
}

TEST(Mxfp8Block, EdgeCases) {
  float x[32], y[32];
  uint8_t v[32];
  std::fill(x, x + 32, 0.0f);
  EXPECT_EQ(mxfp8_quantize_block(x, v), 0);  // all zero: the smallest scale, values zero
  mxfp8_dequantize_block(v, 0, y);
  for (float f : y) EXPECT_EQ(f, 0.0f);

  std::fill(x, x + 32, 1.0f);
  x[0] = 448.0f;  // amax/448 = 1 exactly -> scale 2^0, nothing clips
  EXPECT_EQ(mxfp8_quantize_block(x, v), 127);
  x[0] = 449.0f;  // just above: scale 2^1
  EXPECT_EQ(mxfp8_quantize_block(x, v), 128);

  x[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(mxfp8_quantize_block(x, v), kUE8M0NaN);
  mxfp8_dequantize_block(v, kUE8M0NaN, y);
  for (float f : y) EXPECT_TRUE(std::isnan(f));
}

// The code read from a float's bits, against the codec: every E4M3 value (both zeros, every
// subnormal) gives its own code back, and a float gives a code exactly when the encoder's
// round trip returns it unchanged (floats from 2^-12 to 2^10, random bits).
TEST(E4m3ExactCode, AgreesWithTheCodec) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    EXPECT_EQ(e4m3_exact_code(e4m3_decode(static_cast<uint8_t>(c))), c) << "code " << c;
  }
  auto rng = testing::seeded_rng(18);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    bits = (bits & 0x807FFFFFu) | (static_cast<uint32_t>(127 - 12 + (rng() % 23)) << 23);
    if (i % 2 == 0) bits &= ~((1u << (17 + rng() % 7)) - 1);  // few fraction bits: often exact
    const float y = std::bit_cast<float>(bits);
    const bool round_trips = std::bit_cast<uint32_t>(e4m3_decode(e4m3_encode(y))) == bits;
    const int code = e4m3_exact_code(y);
    ASSERT_EQ(code >= 0, round_trips) << "y = " << y;
    if (code >= 0) ASSERT_EQ(code, e4m3_encode(y)) << "y = " << y;
  }
  EXPECT_EQ(e4m3_exact_code(480.0f), -1);  // past E4M3's largest, 448
  EXPECT_EQ(e4m3_exact_code(0x1p-10f), -1);  // below its smallest, 2^-9
}

// A checkpoint's MXFP8 block, decoded, is found exact and re-encoded losslessly whatever scale
// the checkpoint chose (random codes at scales from 2^-127 to 2^119, the largest whose every
// value is a finite FP32; subnormal codes and signed zeros included);
// a block that is not exactly MXFP8 (one value off by an ulp, an infinity, a NaN) is refused.
TEST(Mxfp8Block, ExactBlocksAreFoundAndReencodedLosslessly) {
  auto rng = testing::seeded_rng(17);
  std::uniform_int_distribution<int> code_dist(0, 255), scale_dist(0, 246);
  float x[32], y[32];
  uint8_t codes[32], found[32];
  for (int trial = 0; trial < 2000; ++trial) {
    const uint8_t s = static_cast<uint8_t>(scale_dist(rng));
    for (uint8_t& c : codes) {
      do c = static_cast<uint8_t>(code_dist(rng)); while ((c & 0x7F) == 0x7F);  // no NaN codes
    }
    if (trial % 4 == 1) codes[trial % 32] = 0x80;  // -0
    if (trial % 4 == 2) for (uint8_t& c : codes) c &= 0x87;  // every value subnormal
    mxfp8_dequantize_block(codes, s, x);
    uint8_t scale = 0;
    ASSERT_TRUE(mxfp8_quantize_block_exact(x, found, scale)) << "trial " << trial << " scale " << int(s);
    mxfp8_dequantize_block(found, scale, y);
    for (int i = 0; i < 32; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(x[i])) << "trial " << trial << " at " << i;
    }
    // One value nudged by an ulp away from zero leaves the E4M3 grid at every scale (E4M3 keeps
    // 3 fraction bits, FP32 23), unless it was zero or too small for the nudge to matter.
    const int at = trial % 32;
    if (std::fabs(x[at]) >= 0x1p-100f) {
      x[at] = std::nextafter(x[at], x[at] > 0 ? INFINITY : -INFINITY);
      EXPECT_FALSE(mxfp8_quantize_block_exact(x, found, scale)) << "trial " << trial;
    }
  }
  std::fill(x, x + 32, 0.0f);
  uint8_t scale = 255;
  ASSERT_TRUE(mxfp8_quantize_block_exact(x, found, scale));
  x[3] = INFINITY;
  EXPECT_FALSE(mxfp8_quantize_block_exact(x, found, scale));
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(mxfp8_quantize_block_exact(x, found, scale));
  // A BF16 value with more than 4 significant bits is not E4M3 at any scale.
  std::fill(x, x + 32, 1.0f);
  x[5] = 1.0f + 0x1p-5f;
  EXPECT_FALSE(mxfp8_quantize_block_exact(x, found, scale));
  // 448 x 2^119, the largest finite FP32 of the form, needs the scale 2^119 (beside values of
  // 2^119; 1.0 would be below E4M3's range there).
  std::fill(x, x + 32, 0x1p119f);
  x[5] = 448.0f * 0x1p119f;
  ASSERT_TRUE(mxfp8_quantize_block_exact(x, found, scale));
  EXPECT_EQ(scale, 246);
}

TEST(CpuQuantize, StridedRowsMatchBlockByBlock) {
  auto rng = testing::seeded_rng(14);
  const int64_t rows = 5, cols = 64, stride = 80;
  const auto x = testing::random_floats(rows * stride, Distribution::kBlockScaled, rng);
  std::vector<uint8_t> codes(rows * cols / 2), scales(rows * cols / 16);
  cpu::quantize(BlockFormat::kNvfp4, {x.data(), DType::kF32, rows, cols, stride, codes.data(), scales.data(), 0.25f});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 16; ++b) {
      uint8_t packed[8];
      ASSERT_EQ(scales[r * 4 + b], nvfp4_quantize_block(x.data() + r * stride + b * 16, 0.25f, packed));
      for (int i = 0; i < 8; ++i) ASSERT_EQ(codes[r * 32 + b * 8 + i], packed[i]);
    }
}

TEST(CpuQuantize, StridedBf16DequantizeMatchesBlockByBlock) {
  auto rng = testing::seeded_rng(16);
  const int64_t rows = 4, cols = 64, stride = 72;
  const auto x = testing::random_floats(rows * cols, Distribution::kBlockScaled, rng);
  for (BlockFormat format : {BlockFormat::kNvfp4, BlockFormat::kMxfp8}) {
    const int block = block_elems(format);
    const int64_t value_bytes = format == BlockFormat::kNvfp4 ? rows * cols / 2 : rows * cols;
    std::vector<uint8_t> values(value_bytes), scales(rows * cols / block);
    cpu::quantize(format, {x.data(), DType::kF32, rows, cols, cols, values.data(), scales.data(), 0.5f});
    std::vector<uint16_t> out(rows * stride, 0xABCD);
    cpu::dequantize(format, {values.data(), scales.data(), 0.5f, rows, cols, out.data(), DType::kBF16, stride});
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / block; ++b) {
        float want[32];
        if (format == BlockFormat::kNvfp4)
          nvfp4_dequantize_block(values.data() + (r * cols + b * block) / 2, scales[r * cols / block + b], 0.5f, want);
        else
          mxfp8_dequantize_block(values.data() + r * cols + b * block, scales[r * cols / block + b], want);
        for (int i = 0; i < block; ++i) ASSERT_EQ(out[r * stride + b * block + i], bf16_encode(want[i]));
      }
      for (int64_t c = cols; c < stride; ++c) ASSERT_EQ(out[r * stride + c], 0xABCD) << "padding written";
    }
  }
}

TEST(CpuQuantize, EmptyTensorsDoNothing) {
  for (BlockFormat format : {BlockFormat::kNvfp4, BlockFormat::kMxfp8}) {
    // No pointers are touched when rows or cols is 0, and a single row needs no stride.
    EXPECT_NO_THROW(cpu::quantize(format, {nullptr, DType::kF32, 0, 32, 0, nullptr, nullptr, 1.0f}));
    EXPECT_NO_THROW(cpu::quantize(format, {nullptr, DType::kF32, 5, 0, 0, nullptr, nullptr, 1.0f}));
    EXPECT_NO_THROW(cpu::dequantize(format, {nullptr, nullptr, 1.0f, 0, 32, nullptr, DType::kBF16, 0}));
  }
}

TEST(CpuQuantize, RejectsBadParams) {
  std::vector<float> x(64);
  std::vector<uint8_t> codes(32), scales(4);
  QuantizeParams p{x.data(), DType::kF32, 2, 32, 32, codes.data(), scales.data(), 1.0f};
  p.cols = 24;  // not a multiple of 16
  EXPECT_THROW(cpu::quantize(BlockFormat::kNvfp4, p), Error);
  p.cols = 32;
  p.global_scale = 0.0f;
  EXPECT_THROW(cpu::quantize(BlockFormat::kNvfp4, p), Error);
  p.global_scale = std::numeric_limits<float>::infinity();
  EXPECT_THROW(cpu::quantize(BlockFormat::kNvfp4, p), Error);
  p.global_scale = 1e38f;  // 6 * g overflows
  EXPECT_THROW(cpu::quantize(BlockFormat::kNvfp4, p), Error);
  p.global_scale = 1.0f;
  p.input_dtype = DType::kE4M3;
  EXPECT_THROW(cpu::quantize(BlockFormat::kNvfp4, p), Error);
  p.input_dtype = DType::kF32;
  p.input_row_stride = 16;
  EXPECT_THROW(cpu::quantize(BlockFormat::kNvfp4, p), Error);
  p.input_row_stride = 32;
  p.cols = 48;  // MXFP8 needs multiples of 32
  EXPECT_THROW(cpu::quantize(BlockFormat::kMxfp8, p), Error);
}

}  // namespace
}  // namespace fp4
