// Router and gated activation on the GPU against the CPU references. The sigmoid's expf may
// differ from glibc's by a few ulp (moe_math.h), so: scores within 2^-20, a differing router
// choice only at a near-tie (the two experts' choice values within 2^-20 of each other), weights
// within 2^-20 relative; activations within 2^-20 relative and NaN where the CPU has NaN, BF16
// outputs within one BF16 step. Exact ties (equal logits) must break to the lower id as on the
// CPU, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/moe_math.h"
#include "formats/minifloat.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

constexpr double kTol = 0x1p-20;

float cpu_choice(const std::vector<float>& logits, const std::vector<float>& bias, int64_t t, int64_t experts,
                 int32_t e) {
  const float s = 1.0f / (1.0f + std::exp(-logits[t * experts + e]));
  return s + (bias.empty() ? 0.0f : bias[e]);
}

void run_router(int64_t tokens, int64_t experts, int64_t top_k, bool with_bias, bool ties, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << tokens << " tokens, top-" << top_k << " of " << experts
                                    << (with_bias ? ", bias" : "") << (ties ? ", ties" : ""));
  auto logits = testing::random_floats(tokens * experts, testing::Distribution::kGaussian, rng);
  for (float& x : logits) x = ties ? std::round(x) : 2.0f * x;  // ties: a handful of distinct values
  std::vector<float> bias;
  if (with_bias) {
    bias = testing::random_floats(experts, testing::Distribution::kGaussian, rng);
    for (float& b : bias) b *= 0.05f;
  }
  std::vector<int32_t> want_ids(tokens * top_k);
  std::vector<float> want_w(tokens * top_k);
  RouterParams c{.logits = logits.data(), .bias = bias.empty() ? nullptr : bias.data(), .tokens = tokens,
                 .experts = experts, .top_k = top_k, .expert_ids = want_ids.data(), .weights = want_w.data()};
  cpu::router(c);
  const auto d_logits = cuda::DeviceBuffer::copy_of(logits), d_bias = cuda::DeviceBuffer::copy_of(bias);
  cuda::DeviceBuffer d_ids(want_ids.size() * 4), d_w(want_w.size() * 4);
  d_ids.fill(0xA5);
  d_w.fill(0xFF);
  RouterParams d = c;
  d.logits = d_logits.as<float>();
  d.bias = bias.empty() ? nullptr : d_bias.as<float>();
  d.expert_ids = d_ids.as<int32_t>();
  d.weights = d_w.as<float>();
  cuda::router(d, nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  const auto ids = d_ids.download_vector<int32_t>(want_ids.size());
  const auto w = d_w.download_vector<float>(want_w.size());
  for (int64_t t = 0; t < tokens; ++t) {
    bool same = true;
    for (int64_t k = 0; k < top_k; ++k) {
      const int32_t g = ids[t * top_k + k], e = want_ids[t * top_k + k];
      ASSERT_TRUE(g >= 0 && g < experts) << "token " << t << " slot " << k << ": expert " << g;
      if (g == e) continue;
      same = false;
      ASSERT_FALSE(ties) << "token " << t << " slot " << k << ": exact ties must break as on the CPU";
      ASSERT_LE(std::abs(cpu_choice(logits, bias, t, experts, g) - cpu_choice(logits, bias, t, experts, e)), kTol)
          << "token " << t << " slot " << k << ": GPU chose " << g << ", CPU " << e << ", not a near-tie";
    }
    if (!same) continue;
    for (int64_t k = 0; k < top_k; ++k) {
      const float g = w[t * top_k + k], e = want_w[t * top_k + k];
      ASSERT_LE(std::abs(g - e), kTol * std::abs(e)) << "token " << t << " slot " << k;
    }
  }
}

void run_activation(int64_t m, int64_t inter, GatedActivation kind, bool bf16_out, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << m << " x " << inter << (kind == GatedActivation::kSilu ? " silu" : " swiglu-oai")
                                    << (bf16_out ? ", BF16 out" : ""));
  const int64_t stride = 2 * inter + 3;  // gate and up side by side in one row, as a fused GEMM writes
  auto gu = testing::random_floats(m * stride, testing::Distribution::kGaussian, rng);
  for (float& x : gu) x *= 5.0f;  // past the clamp limit of 7 now and then
  gu[0] = std::nanf("");
  GatedActivationParams c{.gate = gu.data(), .up = gu.data() + inter, .m = m, .inter = inter, .stride = stride,
                          .kind = kind};
  std::vector<float> want(m * inter);
  std::vector<uint16_t> want16(m * inter);
  if (bf16_out) c.out_bf16 = want16.data();
  else c.out = want.data();
  cpu::gated_activation(c);
  const auto d_gu = cuda::DeviceBuffer::copy_of(gu);
  cuda::DeviceBuffer d_out(m * inter * 4);
  d_out.fill(0x7B);
  GatedActivationParams d = c;
  d.gate = d_gu.as<float>();
  d.up = d_gu.as<float>() + inter;
  if (bf16_out) d.out_bf16 = d_out.as<uint16_t>();
  else d.out = d_out.as<float>();
  cuda::gated_activation(d, nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  if (bf16_out) {
    const auto got = d_out.download_vector<uint16_t>(m * inter);
    for (int64_t i = 0; i < m * inter; ++i) {
      const float g = bf16_decode(got[i]), e = bf16_decode(want16[i]);
      if (std::isnan(e)) {
        ASSERT_TRUE(std::isnan(g)) << i;
        continue;
      }
      ASSERT_LE(std::abs(int{got[i]} - int{want16[i]}), 1) << i << ": GPU " << g << ", CPU " << e;
    }
  } else {
    const auto got = d_out.download_vector<float>(m * inter);
    for (int64_t i = 0; i < m * inter; ++i) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << i;
        continue;
      }
      ASSERT_LE(std::abs(got[i] - want[i]), kTol * std::abs(want[i]) + 1e-37) << i << ": GPU " << got[i]
                                                                            << ", CPU " << want[i];
    }
  }
}

class MoeMathKernel : public testing::GpuTest {};

TEST_F(MoeMathKernel, RouterMatchesCpu) {
  auto rng = testing::seeded_rng(61);
  run_router(1, 128, 4, true, false, rng);
  run_router(37, 128, 8, false, false, rng);
  run_router(1000, 256, 8, true, false, rng);
  run_router(9, 8, 1, true, false, rng);
  run_router(50, 128, 4, false, true, rng);
  run_router(50, 1024, 32, false, true, rng);
}

TEST_F(MoeMathKernel, GatedActivationMatchesCpu) {
  auto rng = testing::seeded_rng(62);
  for (GatedActivation kind : {GatedActivation::kSilu, GatedActivation::kSwigluOai}) {
    for (bool bf16_out : {false, true}) {
      run_activation(1, 96, kind, bf16_out, rng);
      run_activation(37, 300, kind, bf16_out, rng);
    }
  }
}

}  // namespace
}  // namespace fp4
