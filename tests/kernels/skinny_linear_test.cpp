// The skinny linear (backend/cuda/skinny_linear.h) on BF16 and MXFP8 weights against the CPU's
// FP32 linear on the same numbers (the weights decoded to FP32), on fresh random inputs.
// Bound: both sides sum k terms x_l w_l in FP32, in different orders, the GPU's by fused
// multiply-adds and the CPU's as it does; each result is within gamma_k S of the exact sum
// (S = sum |x w|, gamma_k = k u / (1 - k u), u = 2^-24), so they are within 2 gamma_k S of each
// other.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/buffer.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/skinny_linear.h"
#include "formats/minifloat.h"
#include "formats/mxfp8.h"
#include "tests/support/gpu_test.h"
#include "tests/support/linear_bound.h"
#include "tests/support/random.h"
#include "tests/support/random_mxfp8.h"

namespace fp4 {
namespace {

class SkinnyLinear : public testing::CudaBackendTest {};

TEST_F(SkinnyLinear, WithinTheFp32SummationBoundOfTheCpu) {
  auto rng = testing::seeded_rng(91);
  struct Shape { int64_t m, n, k; };
  // Every row count (5 to 8 on weights of at most kSkinnyNarrowBytes); n not a multiple of the
  // CTA's 4 rows; k from one 16-byte chunk to past 2 x 256 chunks with a partial last round
  // (6,152 = 8 x 769).
  for (Shape s : {Shape{1, 1, 8}, Shape{1, 311, 256}, Shape{2, 5, 6152}, Shape{3, 64, 40}, Shape{4, 513, 6144},
                  Shape{5, 130, 1000}, Shape{6, 7, 4104}, Shape{7, 33, 2048}, Shape{8, 258, 8192}}) {
    SCOPED_TRACE(::testing::Message() << s.m << " x " << s.n << " x " << s.k);
    const auto x = testing::random_floats(s.m * s.k, testing::Distribution::kStudentT3, rng);
    auto w = testing::random_floats(s.n * s.k, testing::Distribution::kGaussian, rng);
    std::vector<uint16_t> bits(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      bits[i] = bf16_encode(w[i]);
      w[i] = bf16_decode(bits[i]);  // the FP32 weight the CPU reads: the same numbers
    }
    // The outputs and a guard past them start as NaN: every output must be written, nothing past.
    constexpr int64_t kGuard = 64;
    Buffer<float> gx(*gpu_, x);
    Buffer<float> gy(*gpu_, std::vector<float>(s.m * s.n + kGuard, std::numeric_limits<float>::quiet_NaN()));
    Buffer<uint16_t> gw(*gpu_, bits);
    const cuda::detail::SkinnyLinearArgs args{.x = gx.data(), .w = gw.data(), .y = gy.data(), .m = s.m, .n = s.n,
                                              .k = s.k};
    ASSERT_TRUE(cuda::detail::skinny_linear_fits(args));
    FP4_CUDA_CHECK(cuda::detail::launch_skinny_linear(args, gpu_->stream()));
    std::vector<float> y(s.m * s.n);
    cpu::linear({.x = x.data(), .w = w.data(), .y = y.data(), .m = s.m, .n = s.n, .k = s.k});
    const auto got = gy.download();
    const double u = 0x1p-24, gamma = s.k * u / (1 - s.k * u);
    ASSERT_GE(testing::check_linear_within(x, w, got, y, s.m, s.n, s.k, 2 * gamma), 0);
    for (int64_t i = s.m * s.n; i < s.m * s.n + kGuard; ++i) ASSERT_TRUE(std::isnan(got[i])) << "written past y at " << i;
  }
}

// Several weights on one x in one launch (CudaBackend::linears): every part's y is the single
// launch's, bit for bit (its CTAs compute it alike), and nothing is written past any part. The
// shapes are a sparse layer's projections of one token, shrunk: q, k, v, index q, index k,
// widths not multiples of the CTA's 4 rows; then two rows of x through the backend op, and a
// group the kernel cannot take (a part too wide for 6 rows), which goes part by part.
TEST_F(SkinnyLinear, GroupedPartsGiveTheSingleLaunchBits) {
  auto rng = testing::seeded_rng(92);
  constexpr int64_t kGuard = 32;
  for (int64_t m : {1, 2, 6}) {
    const int64_t k = m == 6 ? 4096 : 1032;
    const std::vector<int64_t> widths = m == 6 ? std::vector<int64_t>{2048, 130} : std::vector<int64_t>{611, 64, 64, 65, 17};
    SCOPED_TRACE(::testing::Message() << m << " rows, k " << k);
    const auto x = testing::random_floats(m * k, testing::Distribution::kStudentT3, rng);
    Buffer<float> gx(*gpu_, x);
    std::vector<Buffer<uint16_t>> weights;
    std::vector<Buffer<float>> grouped, single;
    std::vector<LinearParams> parts;
    for (int64_t n : widths) {
      const auto w = testing::random_floats(n * k, testing::Distribution::kGaussian, rng);
      std::vector<uint16_t> bits(w.size());
      for (size_t i = 0; i < w.size(); ++i) bits[i] = bf16_encode(w[i]);
      weights.emplace_back(*gpu_, bits);
      grouped.emplace_back(*gpu_, std::vector<float>(m * n + kGuard, std::numeric_limits<float>::quiet_NaN()));
      single.emplace_back(*gpu_, std::vector<float>(m * n, std::numeric_limits<float>::quiet_NaN()));
      parts.push_back({.x = gx.data(), .y = grouped.back().data(), .m = m, .n = n, .k = k,
                       .w_bf16 = weights.back().data()});
    }
    gpu_->linears(parts);
    for (size_t i = 0; i < parts.size(); ++i) {
      LinearParams one = parts[i];
      one.y = single[i].data();
      gpu_->linear(one);
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      const int64_t n = widths[i];
      const auto got = grouped[i].download(), want = single[i].download();
      for (int64_t j = 0; j < m * n; ++j) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[j]), std::bit_cast<uint32_t>(want[j])) << "part " << i << " at " << j;
      }
      for (int64_t j = m * n; j < m * n + kGuard; ++j) ASSERT_TRUE(std::isnan(got[j])) << "part " << i << " past y";
    }
  }
}

// The MXFP8 form against the CPU on the decoded values, within the bound above: each output is
// a sum of the products x w over a tree of additions no deeper than k (a chunk's 16 products from
// zero, its sum times the block's power-of-two scale, which commutes with rounding, added to a
// thread's partial sum, then the CTA's reduction), so within gamma_k S of the exact sum as long
// as no chunk's sum overflows or falls below FP32's normal range. Scales of 2^-8 to 2^7, then of
// 2^-127 to 2^-119, where E4M3 subnormals times the scale are FP32 subnormals (x scaled by
// 2^110 keeps every chunk's sum normal).
TEST_F(SkinnyLinear, Mxfp8WithinTheFp32SummationBoundOfTheCpu) {
  auto rng = testing::seeded_rng(93);
  struct Shape { int64_t m, n, k; int lowest, spread; float x_scale; };
  // k = 6,176: 386 chunks of 16, a partial last round; every row count; tiny scales.
  for (Shape s : {Shape{1, 1, 32, 119, 16, 1.0f}, Shape{1, 311, 6176, 119, 16, 1.0f},
                  Shape{2, 5, 2048, 119, 16, 1.0f}, Shape{3, 64, 96, 119, 16, 1.0f},
                  Shape{4, 513, 6144, 119, 16, 1.0f}, Shape{5, 130, 1024, 119, 16, 1.0f},
                  Shape{8, 258, 8192, 119, 16, 1.0f}, Shape{1, 97, 4096, 0, 9, 0x1p110f},
                  Shape{4, 33, 1024, 0, 9, 0x1p110f}}) {
    SCOPED_TRACE(::testing::Message() << s.m << " x " << s.n << " x " << s.k << ", scales from " << s.lowest);
    auto x = testing::random_floats(s.m * s.k, testing::Distribution::kStudentT3, rng);
    for (float& v : x) v *= s.x_scale;
    const testing::Mxfp8Weight w = testing::random_mxfp8(s.n, s.k, s.lowest, s.spread, rng);
    Buffer<float> gx(*gpu_, x);
    Buffer<uint8_t> codes(*gpu_, w.codes), scales(*gpu_, w.scales);
    constexpr int64_t kGuard = 64;
    Buffer<float> gy(*gpu_, std::vector<float>(s.m * s.n + kGuard, std::numeric_limits<float>::quiet_NaN()));
    const cuda::detail::SkinnyLinearArgs mx{.x = gx.data(), .y = gy.data(), .m = s.m, .n = s.n, .k = s.k,
                                            .w_e4m3 = codes.data(), .w_scales = scales.data()};
    ASSERT_TRUE(cuda::detail::skinny_linear_fits(mx));
    FP4_CUDA_CHECK(cuda::detail::launch_skinny_linear(mx, gpu_->stream()));
    const auto got = gy.download();
    std::vector<float> y(s.m * s.n);
    cpu::linear({.x = x.data(), .w = w.values.data(), .y = y.data(), .m = s.m, .n = s.n, .k = s.k});
    const double u = 0x1p-24, gamma = s.k * u / (1 - s.k * u);
    ASSERT_GE(testing::check_linear_within(x, w.values, got, y, s.m, s.n, s.k, 2 * gamma), 0);
    for (int64_t i = s.m * s.n; i < s.m * s.n + kGuard; ++i) ASSERT_TRUE(std::isnan(got[i])) << "written past y at " << i;
  }
}

// Through the backend: an MXFP8-held weight's decode-sized rows (the skinny kernel, alone and
// grouped: the group gives each part its single launch's bits) agree with the CPU within the
// bound above, and a prompt's rows (the weight decoded to BF16, then the three products) give the
// BF16-held form's bits on the same numbers. The rows between take the tensor-core kernel on the
// codes (tests/kernels/mxfp8_linear_test.cpp).
TEST_F(SkinnyLinear, BackendMxfp8Paths) {
  auto rng = testing::seeded_rng(94);
  const int64_t k = 1024;
  const std::vector<int64_t> widths = {700, 64, 129};
  std::vector<testing::Mxfp8Weight> host;
  std::vector<Buffer<uint16_t>> w16;
  std::vector<Buffer<uint8_t>> codes, scales;
  for (int64_t n : widths) {
    host.push_back(testing::random_mxfp8(n, k, 119, 16, rng));
    std::vector<uint16_t> bits(host.back().values.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = bf16_encode(host.back().values[i]);
    w16.emplace_back(*gpu_, bits);
    codes.emplace_back(*gpu_, host.back().codes);
    scales.emplace_back(*gpu_, host.back().scales);
  }
  for (int64_t m : {1, 3, 300}) {
    SCOPED_TRACE(::testing::Message() << m << " rows");
    const auto x = testing::random_floats(m * k, testing::Distribution::kStudentT3, rng);
    Buffer<float> gx(*gpu_, x);
    std::vector<Buffer<float>> single, grouped;
    std::vector<LinearParams> parts;
    for (size_t i = 0; i < widths.size(); ++i) {
      const int64_t n = widths[i];
      single.emplace_back(*gpu_, std::vector<float>(m * n, std::numeric_limits<float>::quiet_NaN()));
      grouped.emplace_back(*gpu_, std::vector<float>(m * n, std::numeric_limits<float>::quiet_NaN()));
      parts.push_back({.x = gx.data(), .y = grouped.back().data(), .m = m, .n = n, .k = k,
                       .w_e4m3 = codes[i].data(), .w_scales = scales[i].data()});
      LinearParams one = parts.back();
      one.y = single.back().data();
      if (m > cuda::detail::kSkinnyNarrowMaxRows) {  // the BF16 form's bits
        one.w_e4m3 = one.w_scales = nullptr;
        one.w_bf16 = w16[i].data();
      }
      gpu_->linear(one);
    }
    gpu_->linears(parts);
    for (size_t i = 0; i < widths.size(); ++i) {
      const int64_t n = widths[i];
      const auto a = grouped[i].download(), b = single[i].download();
      for (size_t j = 0; j < a.size(); ++j) {
        ASSERT_EQ(std::bit_cast<uint32_t>(a[j]), std::bit_cast<uint32_t>(b[j])) << "part " << i << " at " << j;
      }
      if (m <= cuda::detail::kSkinnyNarrowMaxRows) {
        std::vector<float> want(m * n);
        cpu::linear({.x = x.data(), .w = host[i].values.data(), .y = want.data(), .m = m, .n = n, .k = k});
        const double u = 0x1p-24, gamma = k * u / (1 - k * u);
        ASSERT_GE(testing::check_linear_within(x, host[i].values, a, want, m, n, k, 2 * gamma), 0) << "part " << i;
      }
    }
  }
}

// Shapes the kernel does not take go to the three-product path (CudaBackend::linear); the
// launcher refuses them rather than reading past a row.
TEST_F(SkinnyLinear, RefusesShapesItDoesNotTake) {
  Buffer<float> x(*gpu_, 16 * 64), y(*gpu_, 16 * 64);
  Buffer<uint16_t> w(*gpu_, 64 * 64);
  Buffer<uint8_t> codes(*gpu_, 64 * 64);
  const cuda::detail::SkinnyLinearArgs fits{.x = x.data(), .w = w.data(), .y = y.data(), .m = 8, .n = 64, .k = 64};
  EXPECT_TRUE(cuda::detail::skinny_linear_fits(fits));
  auto with = [&](auto change) {
    cuda::detail::SkinnyLinearArgs a = fits;
    change(a);
    return a;
  };
  // Among them five rows of x on a weight past kSkinnyNarrowBytes (the launcher refuses before it
  // reads).
  for (const auto& a : {with([](auto& a) { a.m = 9; }), with([](auto& a) { a.m = 0; }),
                        with([](auto& a) { a.m = 5, a.n = 8192, a.k = 1032; }),
                        with([](auto& a) { a.k = 60; }), with([](auto& a) { a.k = 4; }),
                        with([](auto& a) { a.n = 0; }), with([&](auto& a) { a.x = x.data() + 1; }),
                        with([&](auto& a) { a.w = w.data() + 4; }),
                        with([&](auto& a) { a.w_e4m3 = codes.data(), a.w_scales = codes.data(); }),  // two forms
                        with([&](auto& a) { a.w = nullptr, a.w_e4m3 = codes.data(); }),  // no scales
                        with([&](auto& a) { a.w = nullptr, a.w_e4m3 = codes.data(), a.w_scales = codes.data(),
                                            a.k = 48; }),  // not whole MXFP8 blocks
                        with([&](auto& a) { a.w = nullptr, a.w_e4m3 = codes.data() + 8, a.w_scales = codes.data(); })}) {
    EXPECT_FALSE(cuda::detail::skinny_linear_fits(a));
    EXPECT_EQ(cuda::detail::launch_skinny_linear(a, gpu_->stream()), cudaErrorInvalidValue);
  }
}

// The rule linear routes by (no GPU needed: it reads sizes and addresses only). Up to 4 rows of
// x on any weight; 5-8 only on weights of at most kSkinnyNarrowBytes, where the three products'
// fixed cost outweighs the kernel's slower stream (bench/RESULTS.md, 2026-12-06).
TEST(SkinnyLinearRule, TakesDecodeSizedShapesOnly) {
  alignas(16) static float x[16];
  alignas(16) static uint16_t w[16];
  const auto fits_at = [](int64_t m, int64_t n, int64_t k, const float* xp, const uint16_t* wp) {
    return cuda::detail::skinny_linear_fits({.x = xp, .w = wp, .y = nullptr, .m = m, .n = n, .k = k});
  };
  const auto fits = [&](int64_t m, int64_t n, int64_t k) { return fits_at(m, n, k, x, w); };
  for (int64_t m = 1; m <= 4; ++m) EXPECT_TRUE(fits(m, 8192, 6144)) << m << " rows on q's weight";
  for (int64_t m = 5; m <= 8; ++m) {
    EXPECT_FALSE(fits(m, 8192, 6144)) << m << " rows on q's weight";
    EXPECT_TRUE(fits(m, 512, 6144)) << m << " rows on k's weight";
  }
  const int64_t narrow_rows = cuda::detail::kSkinnyNarrowBytes / (2 * 8192);  // a weight of exactly the limit
  EXPECT_TRUE(fits(8, narrow_rows, 8192));
  EXPECT_FALSE(fits(8, narrow_rows + 1, 8192));
  EXPECT_FALSE(fits(9, 512, 6144));
  EXPECT_FALSE(fits(0, 512, 6144));
  EXPECT_FALSE(fits(1, 512, 6148));  // k not whole 16-byte chunks
  EXPECT_FALSE(fits(1, 0, 6144));
  EXPECT_FALSE(fits_at(1, 512, 6144, x + 1, w));  // x rows not 16-byte aligned
  EXPECT_FALSE(fits_at(1, 512, 6144, x, w + 4));
}

}  // namespace
}  // namespace fp4
