// The seeded generator, its distributions, the arrival process and the random dataset.
// Statistical checks use 5 standard errors, derived beside each assert: a correct generator
// fails one of them with probability below 1e-6, and these seeds are fixed anyway.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "tests/unit/tokenizer/test_tokenizers.h"
#include "tools/fp4serve/bench_serve_dataset.h"
#include "tools/fp4serve/bench_serve_random.h"

namespace fp4::bench_serve {
namespace {

TEST(BenchServeRandom, XoshiroStreamIsFixed) {
  // xoshiro256** seeded with SplitMix64 (whose first output from 0 is the published
  // 0xe220a8397b1dcdaf), computed with Python integers: the stream must not depend on the
  // compiler or the standard library.
  Rng a(0);
  EXPECT_EQ(a.next_u64(), 0x99ec5f36cb75f2b4ull);
  EXPECT_EQ(a.next_u64(), 0xbf6e1f784956452aull);
  EXPECT_EQ(a.next_u64(), 0x1a5f849d4933e6e0ull);
  Rng b(42);
  EXPECT_EQ(b.next_u64(), 0x15780b2e0c2ec716ull);
  EXPECT_EQ(b.next_u64(), 0x6104d9866d113a7eull);
}

TEST(BenchServeRandom, UniformIntIsUniform) {
  Rng rng(1);
  constexpr int kDraws = 60000;
  std::array<int, 6> counts{};
  for (int i = 0; i < kDraws; ++i) {
    const int64_t v = rng.uniform_int(10, 15);
    ASSERT_GE(v, 10);
    ASSERT_LE(v, 15);
    ++counts[static_cast<size_t>(v - 10)];
  }
  // Each count is Binomial(60000, 1/6): mean 10000, sd sqrt(60000/6 * 5/6) = 91.3.
  for (const int c : counts) EXPECT_NEAR(c, 10000, 5 * 91.3);
  EXPECT_EQ(rng.uniform_int(3, 3), 3);
}

struct Moments {
  double mean = 0, var = 0;
};
Moments moments(const std::vector<double>& x) {
  Moments m;
  for (double v : x) m.mean += v;
  m.mean /= static_cast<double>(x.size());
  for (double v : x) m.var += (v - m.mean) * (v - m.mean);
  m.var /= static_cast<double>(x.size());
  return m;
}

TEST(BenchServeRandom, GammaMoments) {
  // Gamma(k, theta): mean k theta, variance k theta^2. Standard errors for n draws: of the mean
  // sqrt(var / n); of the sample variance var sqrt((2 + 6 / k) / n) (excess kurtosis 6 / k).
  constexpr int n = 200000;
  for (const auto& [k, theta] : {std::pair{0.5, 1.0}, std::pair{1.0, 0.25}, std::pair{2.0, 0.5}, std::pair{9.0, 0.1}}) {
    Rng rng(7);
    std::vector<double> x(n);
    for (auto& v : x) v = rng.gamma(k, theta);
    const Moments m = moments(x);
    const double var = k * theta * theta;
    EXPECT_NEAR(m.mean, k * theta, 5 * std::sqrt(var / n)) << "k=" << k;
    EXPECT_NEAR(m.var, var, 5 * var * std::sqrt((2 + 6 / k) / n)) << "k=" << k;
    EXPECT_GT(*std::min_element(x.begin(), x.end()), 0.0);
  }
}

TEST(BenchServeRandom, ArrivalsInfiniteRateAndEqualGaps) {
  Rng rng(0);
  EXPECT_EQ(arrival_times(rng, 4, INFINITY, 1.0), (std::vector<double>{0, 0, 0, 0}));
  // Infinite burstiness: equal gaps 1/rate, so arrival i is at (i + 1) / rate.
  const auto t = arrival_times(rng, 4, 2.0, INFINITY);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], (i + 1) / 2.0, 1e-12);
}

TEST(BenchServeRandom, ArrivalsArePoissonOrGammaScaledToNOverRate) {
  constexpr int n = 20000;
  constexpr double rate = 50.0;
  for (const double k : {1.0, 4.0}) {
    Rng rng(3);
    const auto t = arrival_times(rng, n, rate, k);
    EXPECT_NEAR(t.back(), n / rate, 1e-9);  // the last arrival lands at n / rate exactly
    std::vector<double> gaps = {t[0]};
    for (size_t i = 1; i < t.size(); ++i) {
      ASSERT_GE(t[i], t[i - 1]);
      gaps.push_back(t[i] - t[i - 1]);
    }
    // Scaling leaves the squared coefficient of variation at 1/k; its standard error is about
    // (1/k) sqrt((2 + 6/k) / n).
    const Moments m = moments(gaps);
    EXPECT_NEAR(m.var / (m.mean * m.mean), 1 / k, 5 * (1 / k) * std::sqrt((2 + 6 / k) / n)) << "k=" << k;
  }
}

TEST(BenchServeDataset, LengthRangesAreVllms) {
  EXPECT_EQ(input_len_range(1024, 0.0).lo, 1024);
  EXPECT_EQ(input_len_range(1024, 0.0).hi, 1024);
  EXPECT_EQ(input_len_range(10, 0.25).lo, 7);   // floor(7.5)
  EXPECT_EQ(input_len_range(10, 0.25).hi, 13);  // ceil(12.5)
  EXPECT_EQ(output_len_range(1, 0.5).lo, 1);    // floor(0.5) = 0, raised to 1
  EXPECT_EQ(output_len_range(1, 0.5).hi, 2);    // ceil(1.5)
  EXPECT_THROW(input_len_range(10, 1.0), fp4::Error);
  EXPECT_THROW(input_len_range(10, -0.1), fp4::Error);
}

TEST(BenchServeDataset, LengthsPrefixAndIds) {
  const RandomDatasetSpec spec{/*num_prompts=*/2000, /*input_len=*/100, /*output_len=*/20,
                               /*range_ratio=*/0.5, /*prefix_len=*/16};
  const std::vector<int32_t> allowed = allowed_ids(1000, nullptr);
  Rng rng(11);
  const Dataset d = make_random_dataset(spec, allowed, rng, nullptr);
  ASSERT_EQ(d.prompts.size(), 2000u);
  ASSERT_EQ(d.prefix.size(), 16u);
  double mean_in = 0;
  std::set<std::vector<int32_t>> distinct;
  for (const Prompt& p : d.prompts) {
    const int64_t own = p.input_len - 16;
    EXPECT_GE(own, 50);
    EXPECT_LE(own, 150);
    EXPECT_GE(p.output_len, 10);
    EXPECT_LE(p.output_len, 30);
    EXPECT_EQ(static_cast<int64_t>(p.ids.size()), p.input_len);
    EXPECT_TRUE(std::equal(d.prefix.begin(), d.prefix.end(), p.ids.begin()));
    for (int32_t id : p.ids) ASSERT_TRUE(id >= 0 && id < 1000);
    mean_in += static_cast<double>(own);
    distinct.insert(std::vector<int32_t>(p.ids.begin() + 16, p.ids.end()));
  }
  // Uniform on the 101 integers 50..150: mean 100, variance (101^2 - 1) / 12 = 850, so the
  // mean of 2000 has standard error sqrt(850 / 2000) = 0.652.
  EXPECT_NEAR(mean_in / 2000, 100.0, 5 * 0.652);
  EXPECT_EQ(distinct.size(), 2000u);  // the suffixes differ: only the prefix is shared
}

TEST(BenchServeDataset, SeededAndReproducible) {
  const RandomDatasetSpec spec{50, 32, 8, 0.25, 4};
  const auto allowed = allowed_ids(256, nullptr);
  Rng a(5), b(5), c(6);
  const Dataset da = make_random_dataset(spec, allowed, a, nullptr);
  const Dataset db = make_random_dataset(spec, allowed, b, nullptr);
  const Dataset dc = make_random_dataset(spec, allowed, c, nullptr);
  bool differs = false;
  for (size_t i = 0; i < da.prompts.size(); ++i) {
    EXPECT_EQ(da.prompts[i].ids, db.prompts[i].ids);
    EXPECT_EQ(da.prompts[i].output_len, db.prompts[i].output_len);
    differs = differs || da.prompts[i].ids != dc.prompts[i].ids;
  }
  EXPECT_TRUE(differs);
}

TEST(BenchServeDataset, TokenizerVocabularyAndChatText) {
  using namespace fp4::tokenizer::testing;
  const auto tok = tokenizer::Tokenizer::from_json(
      llama_style({"▁", "a", "b", "c", "d"}, {{"▁", "a"}, {"c", "d"}}).dump());
  const auto allowed = allowed_ids(0, &tok);
  // <unk> <s> </s> are special (ids 0..2); every other id names a token.
  EXPECT_EQ(allowed.front(), 3);
  EXPECT_EQ(static_cast<int32_t>(allowed.size()), tok.vocab_size() - 3);
  const RandomDatasetSpec spec{40, 12, 4, 0.0, 3};
  Rng rng(9);
  const Dataset d = make_random_dataset(spec, allowed, rng, &tok);
  int64_t missing = 0;
  for (const Prompt& p : d.prompts) {
    // The text is what is sent; the ids and the length are its re-encoding.
    EXPECT_EQ(tok.encode(p.text, false), p.ids);
    EXPECT_EQ(static_cast<int64_t>(p.ids.size()), p.input_len);
    if (p.input_len != 15) ++missing;
  }
  EXPECT_EQ(missing, d.length_mismatches);
}

TEST(BenchServeDataset, RejectsEmptyPrompts) {
  const auto allowed = allowed_ids(10, nullptr);
  Rng rng(0);
  EXPECT_THROW(make_random_dataset({5, 0, 4, 0.0, 0}, allowed, rng, nullptr), fp4::Error);
}

}  // namespace
}  // namespace fp4::bench_serve
