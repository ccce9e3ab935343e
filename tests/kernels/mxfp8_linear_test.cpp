// The MXFP8 tensor-core linear (backend/cuda/mxfp8_linear.h) against the CPU's FP32 linear on the
// decoded weight, on fresh random inputs, through the backend (CudaBackend::linear routes 5 to 32
// rows of x on an MXFP8-held weight to it).
// Bound, for output (i, j) with S = sum_l |x_il w_jl| and W = sum_l |w_jl|: the kernel is within
// (gamma'_{32P} + gamma_{k/32 + splits}) (1 + 2^-10) S + 2^-11P S + 2^-25 2^-s_i W of the exact
// sum (mxfp8_linear.h; P pieces, 2^-s_i the row's factor, splits <= k / 128), the CPU within
// gamma_k S; the assert takes their sum with the (1 + 2^-10) rounded up to 1.01. u = 2^-24,
// u' = 2^-23.
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
#include "backend/cuda/mxfp8_linear.h"
#include "formats/mxfp8.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random.h"
#include "tests/support/random_mxfp8.h"

namespace fp4 {
namespace {

class Mxfp8Linear : public testing::CudaBackendTest {};

double gamma(double n, double u) { return n * u / (1 - n * u); }

// The row's factor 2^-s as the kernel works it out: s = 14 - floor(log2 max |x|), capped at 127;
// 0 for a row of zeros.
double row_factor(const float* row, int64_t k) {
  float largest = 0;
  for (int64_t l = 0; l < k; ++l) largest = std::max(largest, std::abs(row[l]));
  if (largest == 0) return 1;
  const int s = std::min(127, 14 - std::ilogb(largest));
  return std::ldexp(1.0, -s);
}

TEST_F(Mxfp8Linear, WithinItsBoundOfTheCpu) {
  auto rng = testing::seeded_rng(95);
  struct Shape { int64_t m, n, k; };
  // Both row tile counts (m not a multiple of 16), n with a partial CTA (136 = 128 + 8) and a
  // partial warp, k of one group and of many (split or not), and k past the 8,192 values the
  // split kernel holds in registers.
  for (Shape s : {Shape{5, 136, 128}, Shape{16, 520, 640}, Shape{17, 64, 6144}, Shape{31, 1024, 1024},
                  Shape{32, 256, 8192}, Shape{8, 8, 384}, Shape{12, 72, 8320}}) {
    SCOPED_TRACE(::testing::Message() << s.m << " x " << s.n << " x " << s.k);
    auto x = testing::random_floats(s.m * s.k, testing::Distribution::kStudentT3, rng);
    // One row of zeros and one scaled far up (its factor far below 1), when there are rows to spare.
    if (s.m >= 5) {
      for (int64_t l = 0; l < s.k; ++l) x[2 * s.k + l] = 0;
      for (int64_t l = 0; l < s.k; ++l) x[3 * s.k + l] *= 0x1p60f;
    }
    const testing::Mxfp8Weight weight = testing::random_mxfp8(s.n, s.k, 110, 30, rng);  // scales 2^-17 to 2^12
    const std::vector<float>& w = weight.values;
    Buffer<float> gx(*gpu_, x);
    Buffer<uint8_t> gcodes(*gpu_, weight.codes), gscales(*gpu_, weight.scales);
    constexpr int64_t kGuard = 64;
    Buffer<float> gy(*gpu_, std::vector<float>(s.m * s.n + kGuard, std::numeric_limits<float>::quiet_NaN()));
    ASSERT_TRUE(cuda::detail::mxfp8_linear_fits(
        {.x = gx.data(), .w_e4m3 = gcodes.data(), .w_scales = gscales.data(), .y = gy.data(), .m = s.m, .n = s.n,
         .k = s.k}));
    gpu_->linear({.x = gx.data(), .y = gy.data(), .m = s.m, .n = s.n, .k = s.k, .w_e4m3 = gcodes.data(),
                  .w_scales = gscales.data()});
    const auto got = gy.download();
    std::vector<float> want(s.m * s.n);
    cpu::linear({.x = x.data(), .w = w.data(), .y = want.data(), .m = s.m, .n = s.n, .k = s.k});
    const double u = 0x1p-24, u_tc = 0x1p-23;
    constexpr int kPieces = cuda::detail::kMxfp8LinearPieces;
    const double per_s = 1.01 * (gamma(32 * kPieces, u_tc) + gamma(double(s.k) / 32 + double(s.k) / 128, u)) +
                         std::ldexp(1.0, -11 * kPieces) + gamma(double(s.k), u);
    int64_t exact = 0;
    for (int64_t i = 0; i < s.m; ++i) {
      const double factor = row_factor(&x[i * s.k], s.k);
      for (int64_t j = 0; j < s.n; ++j) {
        double sum_xw = 0, sum_w = 0;
        for (int64_t l = 0; l < s.k; ++l) {
          sum_xw += std::abs(double(x[i * s.k + l]) * w[j * s.k + l]);
          sum_w += std::abs(double(w[j * s.k + l]));
        }
        const double diff = std::abs(double(got[i * s.n + j]) - want[i * s.n + j]);
        const double bound = per_s * sum_xw + 0x1p-25 * factor * sum_w;
        ASSERT_LE(diff, bound) << "output (" << i << ", " << j << "): " << got[i * s.n + j] << " against "
                               << want[i * s.n + j];
        exact += diff == 0;
      }
    }
    for (int64_t i = s.m * s.n; i < s.m * s.n + kGuard; ++i) ASSERT_TRUE(std::isnan(got[i])) << "written past y at " << i;
    std::printf("[  CHECKED ] %lld x %lld x %lld: %lld of %lld outputs equal the CPU's\n", static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), static_cast<long long>(exact),
                static_cast<long long>(s.m * s.n));
  }
}

// A group of weights of one input (a layer's q, k, v, index_q, index_k) in one launch gives each
// part the bits of its launch alone, whose bound the test above checks: each part's k is split
// as alone. Through the launcher and through CudaBackend::linears (which routes such a group to
// it); outputs poisoned with NaN before every run.
TEST_F(Mxfp8Linear, GroupGivesEachPartTheBitsOfItsLaunchAlone) {
  auto rng = testing::seeded_rng(97);
  const std::vector<int64_t> widths = {1024, 128, 136, 8, 512};  // big, one tile, a partial CTA, one MMA tile
  // Past 8 rows: at 5 to 8 the skinny kernel takes narrow weights alone (skinny_linear.h), so a
  // part's launch alone would not be this kernel's.
  for (int64_t m : {9, 16, 17, 32}) {
    for (int64_t k : {int64_t{128}, int64_t{1024}, int64_t{6144}}) {
      SCOPED_TRACE(::testing::Message() << m << " rows, k " << k);
      const auto x = testing::random_floats(m * k, testing::Distribution::kStudentT3, rng);
      Buffer<float> gx(*gpu_, x);
      std::vector<testing::Mxfp8Weight> weights;
      std::vector<Buffer<uint8_t>> codes, scales;
      for (int64_t n : widths) {
        weights.push_back(testing::random_mxfp8(n, k, 110, 30, rng));
        codes.emplace_back(*gpu_, weights.back().codes);
        scales.emplace_back(*gpu_, weights.back().scales);
      }
      const auto nan_filled = [&](int64_t n) {
        return Buffer<float>(*gpu_, std::vector<float>(m * n, std::numeric_limits<float>::quiet_NaN()));
      };
      std::vector<Buffer<float>> alone, launched, routed;
      std::vector<cuda::detail::Mxfp8LinearArgs> args;
      std::vector<LinearParams> params;
      for (size_t i = 0; i < widths.size(); ++i) {
        const int64_t n = widths[i];
        alone.push_back(nan_filled(n));
        launched.push_back(nan_filled(n));
        routed.push_back(nan_filled(n));
        gpu_->linear({.x = gx.data(), .y = alone.back().data(), .m = m, .n = n, .k = k, .w_e4m3 = codes[i].data(),
                      .w_scales = scales[i].data()});
        args.push_back({.x = gx.data(), .w_e4m3 = codes[i].data(), .w_scales = scales[i].data(),
                        .y = launched.back().data(), .m = m, .n = n, .k = k});
        params.push_back({.x = gx.data(), .y = routed.back().data(), .m = m, .n = n, .k = k,
                          .w_e4m3 = codes[i].data(), .w_scales = scales[i].data()});
      }
      const int count = static_cast<int>(widths.size());
      ASSERT_TRUE(cuda::detail::mxfp8_linear_group_fits(args.data(), count));
      const int64_t workspace_bytes = cuda::detail::mxfp8_linear_group_workspace_bytes(args.data(), count);
      Buffer<uint8_t> workspace(*gpu_, static_cast<size_t>(workspace_bytes));
      FP4_CUDA_CHECK(cuda::detail::launch_mxfp8_linear_group(args.data(), count, workspace.data(), gpu_->stream()));
      gpu_->linears(params);
      for (size_t i = 0; i < widths.size(); ++i) {
        const auto want = alone[i].download(), got = launched[i].download(), got_routed = routed[i].download();
        for (size_t j = 0; j < want.size(); ++j) {
          ASSERT_FALSE(std::isnan(want[j])) << "part " << i << " output " << j << " was not written";
          ASSERT_EQ(std::bit_cast<uint32_t>(got[j]), std::bit_cast<uint32_t>(want[j]))
              << "part " << i << " output " << j;
          ASSERT_EQ(std::bit_cast<uint32_t>(got_routed[j]), std::bit_cast<uint32_t>(want[j]))
              << "part " << i << " output " << j << " through linears";
        }
      }
    }
  }
}

// At 5 to 8 rows the skinny kernel takes narrow weights (skinny_linear.h) and this kernel the
// wide ones, so CudaBackend::linears splits a layer's group by kernel: the narrow parts in one
// skinny launch, the wide ones (two here) in one launch of this kernel. Each part keeps the bits
// of its own `linear` call; outputs poisoned with NaN first.
TEST_F(Mxfp8Linear, LinearsSplitsAGroupByKernelAndKeepsEachPartsBits) {
  auto rng = testing::seeded_rng(99);
  constexpr int64_t k = 6144;
  const std::vector<int64_t> widths = {1536, 128, 1544, 8, 512};  // 1536 x 6144 values: past the narrow limit
  for (int64_t m : {5, 8}) {
    SCOPED_TRACE(::testing::Message() << m << " rows");
    const auto x = testing::random_floats(m * k, testing::Distribution::kStudentT3, rng);
    Buffer<float> gx(*gpu_, x);
    std::vector<Buffer<uint8_t>> codes, scales;
    std::vector<Buffer<float>> alone, routed;
    std::vector<LinearParams> params;
    for (int64_t n : widths) {
      const testing::Mxfp8Weight w = testing::random_mxfp8(n, k, 110, 30, rng);
      codes.emplace_back(*gpu_, w.codes);
      scales.emplace_back(*gpu_, w.scales);
      alone.emplace_back(*gpu_, std::vector<float>(m * n, std::numeric_limits<float>::quiet_NaN()));
      routed.emplace_back(*gpu_, std::vector<float>(m * n, std::numeric_limits<float>::quiet_NaN()));
      params.push_back({.x = gx.data(), .y = routed.back().data(), .m = m, .n = n, .k = k,
                        .w_e4m3 = codes.back().data(), .w_scales = scales.back().data()});
      LinearParams one = params.back();
      one.y = alone.back().data();
      gpu_->linear(one);
    }
    gpu_->linears(params);
    for (size_t i = 0; i < widths.size(); ++i) {
      const auto want = alone[i].download(), got = routed[i].download();
      for (size_t j = 0; j < want.size(); ++j) {
        ASSERT_FALSE(std::isnan(want[j])) << "part " << i << " output " << j << " was not written";
        ASSERT_EQ(std::bit_cast<uint32_t>(got[j]), std::bit_cast<uint32_t>(want[j])) << "part " << i << " output " << j;
      }
    }
  }
}

// The group launch's division of the work (a host function, so this runs without a GPU too): each
// part is split as its launch alone (which is what keeps its bits), the parts' CTAs follow one
// another, every split holds at least one group of k and together they hold each once, and the
// split parts' partial sums lie in disjoint ranges of the scratch.
TEST(Mxfp8LinearPlan, EachPartIsSplitAsAloneAndTheCtasAndScratchTile) {
  auto rng = testing::seeded_rng(98);
  std::uniform_int_distribution<int64_t> width(1, 2048), rows(1, cuda::detail::kMxfp8LinearMaxRows);
  std::uniform_int_distribution<int> parts_of(1, cuda::detail::kMxfp8LinearMaxParts);
  for (int sms : {1, 78, 114, 132}) {
    for (int64_t k : {int64_t{128}, int64_t{1024}, int64_t{6144}, int64_t{8192}}) {
      for (int trial = 0; trial < 50; ++trial) {
        const int64_t m = rows(rng);
        std::vector<cuda::detail::Mxfp8LinearArgs> parts(parts_of(rng));
        for (auto& part : parts) part = {.m = m, .n = 8 * width(rng), .k = k};
        const int count = static_cast<int>(parts.size());
        const auto plan = cuda::detail::mxfp8_linear_group_plan(parts.data(), count, sms);
        SCOPED_TRACE(::testing::Message() << sms << " SMs, m " << m << ", k " << k << ", " << count << " parts");
        ASSERT_EQ(plan.rows, 16 * ((m + 15) / 16));
        ASSERT_EQ(plan.groups, k / 128);
        int64_t next_cta = 0, next_float = 0;
        for (int i = 0; i < count; ++i) {
          const auto& part = plan.parts[i];
          const auto alone = cuda::detail::mxfp8_linear_group_plan(&parts[i], 1, sms).parts[0];
          EXPECT_EQ(part.tiles, alone.tiles) << "part " << i;
          EXPECT_EQ(part.per_split, alone.per_split) << "part " << i;
          EXPECT_EQ(part.splits, alone.splits) << "part " << i;
          EXPECT_EQ(part.tiles, (parts[i].n + 127) / 128) << "part " << i;
          EXPECT_GE(part.splits * part.per_split, plan.groups) << "part " << i;
          EXPECT_LT((part.splits - 1) * part.per_split, plan.groups) << "part " << i << ": an empty split";
          EXPECT_EQ(part.first_cta, next_cta) << "part " << i;
          next_cta += part.tiles * part.splits;
          if (part.splits > 1) {
            EXPECT_EQ(part.partial_offset, next_float) << "part " << i;
            next_float += part.splits * m * parts[i].n;
          }
        }
        EXPECT_EQ(plan.ctas, next_cta);
        EXPECT_GE(plan.partial_bytes, 4 * next_float);
        EXPECT_GE(plan.pieces_bytes, cuda::detail::kMxfp8LinearPieces * plan.rows * k * 2);
        EXPECT_GE(plan.factors_bytes, 4 * plan.rows);
        if (HasFailure()) return;
      }
    }
  }
}

// A row holding an infinity gives non-finite outputs in that row only; the others are unaffected.
TEST_F(Mxfp8Linear, NonFiniteRowsStayInTheirRow) {
  auto rng = testing::seeded_rng(96);
  const int64_t m = 6, n = 16, k = 256;
  auto x = testing::random_floats(m * k, testing::Distribution::kGaussian, rng);
  std::vector<uint8_t> codes(n * k, 0x38), scales(n * k / kMxfp8BlockElems, 127);  // every weight 1.0
  Buffer<uint8_t> gcodes(*gpu_, codes), gscales(*gpu_, scales);
  Buffer<float> gy(*gpu_, m * n);
  const auto run = [&](const std::vector<float>& in) {
    Buffer<float> gx(*gpu_, in);
    gpu_->linear({.x = gx.data(), .y = gy.data(), .m = m, .n = n, .k = k, .w_e4m3 = gcodes.data(),
                  .w_scales = gscales.data()});
    return gy.download();
  };
  const auto clean = run(x);
  x[4 * k + 7] = INFINITY;
  const auto dirty = run(x);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (i == 4) {
        EXPECT_FALSE(std::isfinite(dirty[i * n + j])) << "(" << i << ", " << j << ")";
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(dirty[i * n + j]), std::bit_cast<uint32_t>(clean[i * n + j]))
            << "(" << i << ", " << j << ")";
      }
    }
  }
}

// The shapes the launcher refuses (they go to the decoded-BF16 path), and the routing rule.
TEST_F(Mxfp8Linear, RefusesShapesItDoesNotTake) {
  Buffer<float> x(*gpu_, 33 * 256), y(*gpu_, 33 * 256);
  Buffer<uint8_t> w(*gpu_, 256 * 256), s(*gpu_, 256 * 8);
  const cuda::detail::Mxfp8LinearArgs fits{
      .x = x.data(), .w_e4m3 = w.data(), .w_scales = s.data(), .y = y.data(), .m = 32, .n = 256, .k = 256};
  EXPECT_TRUE(cuda::detail::mxfp8_linear_fits(fits));
  auto with = [&](auto change) {
    cuda::detail::Mxfp8LinearArgs a = fits;
    change(a);
    return a;
  };
  Buffer<uint8_t> workspace(*gpu_, 1 << 20);
  for (const auto& a : {with([](auto& a) { a.m = 33; }), with([](auto& a) { a.m = 0; }),
                        with([](auto& a) { a.n = 12; }), with([](auto& a) { a.k = 192; }),
                        with([&](auto& a) { a.x = x.data() + 1; }), with([&](auto& a) { a.w_e4m3 = w.data() + 8; }),
                        with([&](auto& a) { a.w_scales = s.data() + 2; }), with([](auto& a) { a.w_scales = nullptr; })}) {
    EXPECT_FALSE(cuda::detail::mxfp8_linear_fits(a));
    EXPECT_EQ(cuda::detail::launch_mxfp8_linear(a, workspace.data(), gpu_->stream()), cudaErrorInvalidValue);
  }
  // A group's parts must share x, m and k, and number 1 to kMxfp8LinearMaxParts.
  const cuda::detail::Mxfp8LinearArgs pair[] = {fits, fits};
  EXPECT_TRUE(cuda::detail::mxfp8_linear_group_fits(pair, 2));
  const auto other_x = with([&](auto& a) { a.x = x.data() + 4; });
  const auto other_m = with([](auto& a) { a.m = 16; });
  const auto other_k = with([](auto& a) { a.k = 128; });
  for (const auto& second : {other_x, other_m, other_k}) {
    const cuda::detail::Mxfp8LinearArgs group[] = {fits, second};
    EXPECT_FALSE(cuda::detail::mxfp8_linear_group_fits(group, 2));
    EXPECT_EQ(cuda::detail::launch_mxfp8_linear_group(group, 2, workspace.data(), gpu_->stream()),
              cudaErrorInvalidValue);
  }
  const std::vector<cuda::detail::Mxfp8LinearArgs> too_many(cuda::detail::kMxfp8LinearMaxParts + 1, fits);
  EXPECT_FALSE(cuda::detail::mxfp8_linear_group_fits(too_many.data(), static_cast<int>(too_many.size())));
  EXPECT_FALSE(cuda::detail::mxfp8_linear_group_fits(pair, 0));
}

}  // namespace
}  // namespace fp4
