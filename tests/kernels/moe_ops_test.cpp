// MoE dispatch, gather and combine on the GPU against the CPU references, bit for bit: random
// routings (distinct experts per token, as the router makes them) over 8 and 128 experts, with
// and without a shared expert, outputs poisoned first; and expert ids out of range (past the
// last expert, negative), which the GPU must confine to their tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/moe_ops.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

std::vector<int32_t> route(int64_t tokens, int64_t top_k, int64_t experts, std::mt19937_64& rng) {
  std::vector<int32_t> ids, all(experts);
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + top_k);
  }
  return ids;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void run_case(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, bool shared, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << tokens << " tokens, top-" << top_k << " of " << experts << ", hidden "
                                    << hidden << (shared ? ", shared expert" : ""));
  const int64_t pairs = tokens * top_k;
  const auto ids = route(tokens, top_k, experts, rng);
  std::vector<int32_t> offsets(experts + 1), pair_of_row(pairs), row_of_pair(pairs);
  cpu::moe_dispatch({.expert_ids = ids.data(), .tokens = tokens, .top_k = top_k, .experts = experts,
                     .row_offsets = offsets.data(), .pair_of_row = pair_of_row.data(),
                     .row_of_pair = row_of_pair.data()});
  const auto d_ids = cuda::DeviceBuffer::copy_of(ids);
  cuda::DeviceBuffer d_off((experts + 1) * 4), d_por(std::max<int64_t>(pairs, 1) * 4),
      d_rop(std::max<int64_t>(pairs, 1) * 4);
  for (auto* b : {&d_off, &d_por, &d_rop}) b->fill(0xA5);
  cuda::moe_dispatch({.expert_ids = d_ids.as<int32_t>(), .tokens = tokens, .top_k = top_k, .experts = experts,
                      .row_offsets = d_off.as<int32_t>(), .pair_of_row = d_por.as<int32_t>(),
                      .row_of_pair = d_rop.as<int32_t>()},
                     nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(d_off.download_vector<int32_t>(experts + 1), offsets);
  EXPECT_EQ(d_por.download_vector<int32_t>(pairs), pair_of_row);
  EXPECT_EQ(d_rop.download_vector<int32_t>(pairs), row_of_pair);

  // Gather: every float class BF16 rounds differently (ties, NaN, infinities, subnormals).
  auto x = testing::random_floats(tokens * hidden, testing::Distribution::kBlockScaled, rng);
  if (!x.empty()) {
    x[0] = std::nanf("");
    x[x.size() / 2] = -INFINITY;
    x.back() = 1e-40f;
  }
  std::vector<uint16_t> want_x(pairs * hidden);
  cpu::moe_gather({.x = x.data(), .pair_of_row = pair_of_row.data(), .rows = pairs, .top_k = top_k,
                   .hidden = hidden, .x_grouped = want_x.data()});
  const auto d_x = cuda::DeviceBuffer::copy_of(x);
  cuda::DeviceBuffer d_xg(std::max<int64_t>(pairs * hidden, 1) * 2);
  d_xg.fill(0x5A);
  cuda::moe_gather({.x = d_x.as<float>(), .pair_of_row = d_por.as<int32_t>(), .rows = pairs, .top_k = top_k,
                    .hidden = hidden, .x_grouped = d_xg.as<uint16_t>()},
                   nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(d_xg.download_vector<uint16_t>(pairs * hidden), want_x);

  // Combine, the output written over the shared expert's as the forward pass does.
  const auto y = testing::random_floats(pairs * hidden, testing::Distribution::kGaussian, rng);
  std::vector<float> weights(pairs);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (float& w : weights) w = unit(rng);
  std::vector<float> want = shared ? testing::random_floats(tokens * hidden, testing::Distribution::kGaussian, rng)
                                   : std::vector<float>(tokens * hidden, 0.0f);
  const auto d_y = cuda::DeviceBuffer::copy_of(y), d_w = cuda::DeviceBuffer::copy_of(weights);
  cuda::DeviceBuffer d_out(std::max<int64_t>(tokens * hidden, 1) * 4);
  if (shared) d_out.upload(want.data(), want.size() * 4);
  else d_out.fill(0xFF);  // NaN: unwritten outputs fail
  cpu::moe_combine({.y_grouped = y.data(), .row_of_pair = row_of_pair.data(), .expert_ids = ids.data(),
                    .weights = weights.data(), .shared = shared ? want.data() : nullptr, .routed_scale = 2.5f,
                    .out = want.data(), .tokens = tokens, .top_k = top_k, .hidden = hidden});
  cuda::moe_combine({.y_grouped = d_y.as<float>(), .row_of_pair = d_rop.as<int32_t>(),
                     .expert_ids = d_ids.as<int32_t>(), .weights = d_w.as<float>(),
                     .shared = shared ? d_out.as<float>() : nullptr, .routed_scale = 2.5f, .out = d_out.as<float>(),
                     .tokens = tokens, .top_k = top_k, .hidden = hidden},
                    nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bits(d_out.download_vector<float>(tokens * hidden), want)) << "combine differs from the CPU's bits";
}

class MoeOpsKernel : public testing::GpuTest {};

TEST_F(MoeOpsKernel, MatchCpuBitForBit) {
  auto rng = testing::seeded_rng(51);
  run_case(1, 4, 128, 64, true, rng);
  run_case(37, 4, 128, 300, false, rng);
  run_case(300, 8, 8, 96, true, rng);     // every expert busy, more pairs than a CTA's threads
  run_case(1000, 4, 128, 32, false, rng);
  run_case(0, 4, 128, 64, false, rng);    // an empty step still writes the offsets
}

TEST_F(MoeOpsKernel, ExpertIdsOutOfRangeStayInTheirTokens) {
  auto rng = testing::seeded_rng(52);
  const int64_t tokens = 20, top_k = 4, experts = 16, hidden = 40, pairs = tokens * top_k;
  auto ids = route(tokens, top_k, experts, rng);
  ids[5 * top_k + 2] = static_cast<int32_t>(experts);  // token 5: one past the last expert
  ids[9 * top_k + 0] = -1;                             // token 9: negative
  const auto d_ids = cuda::DeviceBuffer::copy_of(ids);
  cuda::DeviceBuffer d_off((experts + 1) * 4), d_por(pairs * 4), d_rop(pairs * 4), d_xg(pairs * hidden * 2);
  cuda::moe_dispatch({.expert_ids = d_ids.as<int32_t>(), .tokens = tokens, .top_k = top_k, .experts = experts,
                      .row_offsets = d_off.as<int32_t>(), .pair_of_row = d_por.as<int32_t>(),
                      .row_of_pair = d_rop.as<int32_t>()},
                     nullptr);
  const auto x = testing::random_floats(tokens * hidden, testing::Distribution::kGaussian, rng);
  const auto d_x = cuda::DeviceBuffer::copy_of(x);
  cuda::moe_gather({.x = d_x.as<float>(), .pair_of_row = d_por.as<int32_t>(), .rows = pairs, .top_k = top_k,
                    .hidden = hidden, .x_grouped = d_xg.as<uint16_t>()},
                   nullptr);
  const auto y = testing::random_floats(pairs * hidden, testing::Distribution::kGaussian, rng);
  const std::vector<float> weights(pairs, 0.25f);
  const auto d_y = cuda::DeviceBuffer::copy_of(y), d_w = cuda::DeviceBuffer::copy_of(weights);
  cuda::DeviceBuffer d_out(tokens * hidden * 4);
  d_out.fill(0x3F);  // finite: the NaNs must come from the kernel
  cuda::moe_combine({.y_grouped = d_y.as<float>(), .row_of_pair = d_rop.as<int32_t>(),
                     .expert_ids = d_ids.as<int32_t>(), .weights = d_w.as<float>(), .shared = nullptr,
                     .routed_scale = 1.0f, .out = d_out.as<float>(), .tokens = tokens, .top_k = top_k,
                     .hidden = hidden},
                    nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());

  // Dispatch: the valid pairs grouped as the CPU groups them (its input without the two bad
  // pairs would shift no valid pair's expert), the bad ones placed nowhere.
  const auto offsets = d_off.download_vector<int32_t>(experts + 1);
  const auto pair_of_row = d_por.download_vector<int32_t>(pairs), row_of_pair = d_rop.download_vector<int32_t>(pairs);
  EXPECT_EQ(offsets.back(), pairs - 2);
  EXPECT_EQ(row_of_pair[5 * top_k + 2], -1);
  EXPECT_EQ(row_of_pair[9 * top_k + 0], -1);
  EXPECT_EQ(pair_of_row[pairs - 1], -1);
  EXPECT_EQ(pair_of_row[pairs - 2], -1);
  for (int64_t e = 0; e < experts; ++e) {
    for (int32_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      ASSERT_EQ(ids[pair_of_row[r]], e) << "row " << r;
      ASSERT_EQ(row_of_pair[pair_of_row[r]], r) << "row " << r;
      if (r > offsets[e]) {
        ASSERT_LT(pair_of_row[r - 1], pair_of_row[r]) << "row " << r << ": not stable";
      }
    }
  }
  // Gather: the two rows past the valid pairs are NaN.
  const auto xg = d_xg.download_vector<uint16_t>(pairs * hidden);
  for (int64_t j = 0; j < hidden; ++j) {
    EXPECT_EQ(xg[(pairs - 1) * hidden + j], 0x7FC0);
    EXPECT_EQ(xg[(pairs - 2) * hidden + j], 0x7FC0);
  }
  // Combine: NaN for tokens 5 and 9 only; every other token the CPU's bits on the same rows.
  const auto out = d_out.download_vector<float>(tokens * hidden);
  for (int64_t t = 0; t < tokens; ++t) {
    if (t == 5 || t == 9) {
      for (int64_t j = 0; j < hidden; ++j) EXPECT_TRUE(std::isnan(out[t * hidden + j])) << "token " << t;
      continue;
    }
    std::vector<float> want(hidden);
    cpu::moe_combine({.y_grouped = y.data(), .row_of_pair = row_of_pair.data() + t * top_k,
                      .expert_ids = ids.data() + t * top_k, .weights = weights.data() + t * top_k,
                      .shared = nullptr, .routed_scale = 1.0f, .out = want.data(), .tokens = 1, .top_k = top_k,
                      .hidden = hidden});
    EXPECT_TRUE(same_bits(std::vector<float>(out.begin() + t * hidden, out.begin() + (t + 1) * hidden), want))
        << "token " << t;
  }
}

}  // namespace
}  // namespace fp4
