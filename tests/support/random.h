// Fresh random inputs for tests: a new seed every run (printed before the first test, so a
// failure can be replayed with FP4_TEST_SEED=<seed>), never zeros.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fp4::testing {

inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("FP4_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(env, nullptr, 10));
    return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ static_cast<uint64_t>(std::random_device{}());
  }();
  return seed;
}

// Prints the run's seed once, before any test, in every test binary that includes this header.
class SeedPrinter : public ::testing::Environment {
 public:
  void SetUp() override { std::printf("[   SEED   ] FP4_TEST_SEED=%llu\n", static_cast<unsigned long long>(test_seed())); }
};
inline ::testing::Environment* const seed_printer = ::testing::AddGlobalTestEnvironment(new SeedPrinter);

// Records the seed in the XML report too.
inline std::mt19937_64 seeded_rng(uint64_t salt = 0) {
  ::testing::Test::RecordProperty("seed", std::to_string(test_seed()));
  return std::mt19937_64(test_seed() ^ (salt * 0x9E3779B97F4A7C15ull));
}

enum class Distribution { kGaussian, kStudentT3, kBlockScaled };

// kBlockScaled: N(0,1) times 2^u per 16 values, u ~ U(-10, 10), so block scales vary widely.
inline std::vector<float> random_floats(size_t n, Distribution dist, std::mt19937_64& rng) {
  std::vector<float> out(n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::student_t_distribution<float> student(3.0f);
  std::uniform_real_distribution<float> log_scale(-10.0f, 10.0f);
  float scale = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    switch (dist) {
      case Distribution::kGaussian: out[i] = normal(rng); break;
      case Distribution::kStudentT3: out[i] = student(rng); break;
      case Distribution::kBlockScaled:
        if (i % 16 == 0) scale = std::exp2(log_scale(rng));
        out[i] = normal(rng) * scale;
        break;
    }
  }
  return out;
}

}  // namespace fp4::testing
