// The CPU backend's memory calls and the two ops the forward pass gained with the device-resident
// runner: the residual add fused with RMSNorm, and row gathers. Fresh random inputs; the fused op
// must equal the add followed by rms_norm bit for bit (the same float operations in the same
// order), and a gather is a copy.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/buffer.h"
#include "backend/cpu/cpu_backend.h"
#include "tests/support/expect_error.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

TEST(CpuMemory, BuffersRoundTripAlignAndZero) {
  cpu::CpuBackend cpu;
  EXPECT_TRUE(cpu.uses_host_memory());
  EXPECT_EQ(cpu.device_memory().total_bytes, 0);
  EXPECT_FALSE(cpu.supports_capture());
  auto rng = testing::seeded_rng(90);
  const auto host = testing::random_floats(1001, testing::Distribution::kGaussian, rng);
  Buffer<float> b(cpu, host);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 256, 0u);
  EXPECT_EQ(b.download(), host);
  b.zero();
  EXPECT_EQ(b.download(), std::vector<float>(host.size(), 0.0f));
  Buffer<float> moved = std::move(b);
  EXPECT_EQ(moved.size(), host.size());
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(Buffer<int32_t>(cpu, 0).data(), nullptr);
  testing::expect_error([&] { moved.upload(std::vector<float>(2000)); }, {"upload of 2000 elements"});
  testing::expect_error([&] { cpu.begin_capture(); }, {"cannot record ops"});
}

TEST(CpuOps, AddRmsNormIsTheAddThenTheNorm) {
  auto rng = testing::seeded_rng(91);
  for (bool gemma : {false, true}) {
    const int64_t rows = 9, dim = 200;
    auto x = testing::random_floats(rows * dim, testing::Distribution::kStudentT3, rng);
    const auto delta = testing::random_floats(rows * dim, testing::Distribution::kGaussian, rng);
    const auto w = testing::random_floats(dim, testing::Distribution::kGaussian, rng);
    std::vector<float> sum(x.size()), want(x.size()), got(x.size());
    for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + delta[i];
    cpu::rms_norm({.x = sum.data(), .weight = w.data(), .y = want.data(), .rows = rows, .dim = dim, .eps = 1e-6f,
                   .gemma = gemma});
    cpu::add_rms_norm({.x = x.data(), .delta = delta.data(), .weight = w.data(), .y = got.data(), .rows = rows,
                       .dim = dim, .eps = 1e-6f, .gemma = gemma});
    EXPECT_EQ(std::memcmp(x.data(), sum.data(), x.size() * 4), 0) << "x must hold x + delta";
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
  }
}

TEST(CpuOps, GatherRowsCopiesAndRefusesBadIds) {
  auto rng = testing::seeded_rng(92);
  const int64_t rows = 17, dim = 33;
  const auto table = testing::random_floats(rows * dim, testing::Distribution::kGaussian, rng);
  std::vector<int32_t> ids = {16, 0, 3, 3};
  std::vector<float> out(ids.size() * dim);
  cpu::gather_rows({.table = table.data(), .table_rows = rows, .dim = dim, .ids = ids.data(),
                    .count = static_cast<int64_t>(ids.size()), .out = out.data()});
  for (size_t r = 0; r < ids.size(); ++r) {
    EXPECT_EQ(std::memcmp(&out[r * dim], &table[ids[r] * dim], dim * 4), 0) << "row " << r;
  }
  ids[2] = 17;
  testing::expect_error([&] {
    cpu::gather_rows({.table = table.data(), .table_rows = rows, .dim = dim, .ids = ids.data(),
                      .count = static_cast<int64_t>(ids.size()), .out = out.data()});
  }, {"row id 17 is outside the table's 17 rows"});
}

}  // namespace
}  // namespace fp4
