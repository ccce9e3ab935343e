// The CPU backend's MoE ops against references written here: the NVFP4 expert matmul against a
// double dot product over weights decoded by the NVFP4 dequantizer (an independent path), and
// dispatch / combine against their definitions on a hand-sized routing.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quantize.h"
#include "formats/minifloat.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

TEST(CpuExpertGemm, MatchesDoubleDotProductsOverDequantizedWeights) {
  auto rng = testing::seeded_rng(71);
  const int64_t experts = 3, n = 5, k = 64;
  const std::vector<int32_t> offsets = {0, 2, 2, 5};  // expert 1 has no token
  const int64_t rows = offsets.back();
  const std::vector<float> global = {0.5f, 2.0f, 0.03125f};
  std::vector<uint8_t> values(experts * n * k / 2), scales(experts * n * k / 16);
  std::vector<float> w_hat(experts * n * k);  // dequantized, global scale included
  for (int64_t e = 0; e < experts; ++e) {
    const auto w = testing::random_floats(n * k, testing::Distribution::kBlockScaled, rng);
    QuantizeParams q{.input = w.data(), .rows = n, .cols = k, .input_row_stride = k,
                     .values = values.data() + e * n * k / 2, .scales = scales.data() + e * n * k / 16,
                     .global_scale = global[e]};
    cpu::quantize(BlockFormat::kNvfp4, q);
    cpu::dequantize(BlockFormat::kNvfp4, {.values = q.values, .scales = q.scales, .global_scale = global[e],
                                          .rows = n, .cols = k, .output = w_hat.data() + e * n * k,
                                          .output_row_stride = k});
  }
  std::vector<uint16_t> x(rows * k);
  const auto xf = testing::random_floats(rows * k, testing::Distribution::kGaussian, rng);
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_encode(xf[i]);
  std::vector<float> y(rows * n), magnitude(rows * n);
  ExpertGemmParams p{.x = x.data(), .row_offsets = offsets.data(), .values = values.data(), .scales = scales.data(),
                     .global_scales = global.data(), .y = y.data(), .rows = rows, .experts = experts, .n = n, .k = k};
  cpu::expert_gemm(p);
  p.y = magnitude.data();
  cpu::expert_gemm_magnitude(p);
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0.0, abs_dot = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          const double term = double{bf16_decode(x[r * k + i])} * w_hat[(e * n + j) * k + i];
          dot += term;
          abs_dot += std::abs(term);
        }
        // The dequantizer rounds each (e2m1 sf) g to float (u relative per term); expert_gemm
        // multiplies the float-rounded sum by g once: at most 3 u of sum |terms| apart.
        EXPECT_NEAR(y[r * n + j], dot, 3 * 0x1p-24 * abs_dot) << "row " << r << " feature " << j;
        EXPECT_NEAR(magnitude[r * n + j], abs_dot, 3 * 0x1p-24 * abs_dot) << "row " << r << " feature " << j;
      }
    }
  }
}

TEST(CpuMoe, DispatchGroupsStablyAndCombineSumsInExpertOrder) {
  // 3 tokens, top-2 of 4 experts; pair = token * 2 + slot.
  const std::vector<int32_t> ids = {2, 0, 0, 3, 2, 1};
  std::vector<int32_t> offsets(5), pair_of_row(6), row_of_pair(6);
  cpu::moe_dispatch({.expert_ids = ids.data(), .tokens = 3, .top_k = 2, .experts = 4, .row_offsets = offsets.data(),
                     .pair_of_row = pair_of_row.data(), .row_of_pair = row_of_pair.data()});
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 2, 3, 5, 6}));
  EXPECT_EQ(pair_of_row, (std::vector<int32_t>{1, 2, 5, 0, 4, 3}));
  EXPECT_EQ(row_of_pair, (std::vector<int32_t>{3, 0, 1, 5, 4, 2}));

  const int64_t hidden = 2;
  std::vector<float> y(6 * hidden);
  for (size_t i = 0; i < y.size(); ++i) y[i] = 1.0f + static_cast<float>(i);
  const std::vector<float> weights = {0.25f, 0.75f, 0.5f, 0.5f, 1.0f, 3.0f};
  std::vector<float> out = {10.0f, 20.0f, 30.0f, 40.0f, 50.0f, 60.0f};  // the shared expert's
  const std::vector<float> shared = out;
  cpu::moe_combine({.y_grouped = y.data(), .row_of_pair = row_of_pair.data(), .expert_ids = ids.data(),
                    .weights = weights.data(), .shared = out.data(), .routed_scale = 2.0f, .out = out.data(),
                    .tokens = 3, .top_k = 2, .hidden = hidden});
  for (int64_t t = 0; t < 3; ++t) {
    // Slots in ascending expert order, each a float product then a float sum.
    const int first = ids[2 * t] <= ids[2 * t + 1] ? 0 : 1;
    for (int64_t j = 0; j < hidden; ++j) {
      float routed = 0.0f;
      for (int s : {first, 1 - first}) routed += weights[2 * t + s] * y[row_of_pair[2 * t + s] * hidden + j];
      EXPECT_EQ(out[t * hidden + j], shared[t * hidden + j] + 2.0f * routed) << "token " << t;
    }
  }
}

TEST(CpuGatedActivation, Bf16OutputIsTheRoundedFloatOutput) {
  auto rng = testing::seeded_rng(72);
  const int64_t m = 3, inter = 40;
  const auto gate = testing::random_floats(m * inter, testing::Distribution::kStudentT3, rng);
  const auto up = testing::random_floats(m * inter, testing::Distribution::kStudentT3, rng);
  for (GatedActivation kind : {GatedActivation::kSilu, GatedActivation::kSwigluOai}) {
    std::vector<float> out(m * inter);
    std::vector<uint16_t> out16(m * inter);
    GatedActivationParams p{.gate = gate.data(), .up = up.data(), .out = out.data(), .m = m, .inter = inter,
                            .stride = inter, .kind = kind};
    cpu::gated_activation(p);
    p.out = nullptr;
    p.out_bf16 = out16.data();
    cpu::gated_activation(p);
    for (int64_t i = 0; i < m * inter; ++i) EXPECT_EQ(out16[i], bf16_encode(out[i])) << i;
  }
}

}  // namespace
}  // namespace fp4
