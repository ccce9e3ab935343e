// SamplingParams::validate, TokenCounts bookkeeping and the counter-based random stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/sampling_rng.h"
#include "backend/sampling_weights.h"
#include "sampling/sampling_params.h"
#include "sampling/token_counts.h"
#include "tests/support/expect_error.h"
#include "tests/support/random.h"

namespace fp4::sampling {
namespace {

using fp4::testing::expect_error;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplingParams, AcceptsDefaultsAndEveryBoundary) {
  SamplingParams p;
  EXPECT_NO_THROW(p.validate());
  p.temperature = 0.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 1.0f, p.repetition_penalty = 1e-3f;
  p.frequency_penalty = -2.0f, p.presence_penalty = 2.0f, p.logprobs = kMaxLogprobs;
  EXPECT_NO_THROW(p.validate());
  p.top_k = 1, p.top_p = 1e-6f, p.min_p = 0.0f, p.frequency_penalty = 2.0f, p.presence_penalty = -2.0f;
  p.logprobs = 0;
  EXPECT_NO_THROW(p.validate());
}

TEST(SamplingParams, ErrorsNameTheFieldAndItsRange) {
  struct Case {
    std::function<void(SamplingParams&)> set;
    std::vector<std::string_view> parts;
  };
  const std::vector<Case> cases = {
      {[](SamplingParams& p) { p.temperature = -0.5f; }, {"temperature", "non-negative", "-0.5"}},
      {[](SamplingParams& p) { p.temperature = kInf; }, {"temperature", "finite"}},
      {[](SamplingParams& p) { p.temperature = kNaN; }, {"temperature"}},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, {"top_p", "(0, 1]"}},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, {"top_p", "(0, 1]", "1.5"}},
      {[](SamplingParams& p) { p.top_p = kNaN; }, {"top_p"}},
      {[](SamplingParams& p) { p.top_k = -2; }, {"top_k", "-1", "-2"}},
      {[](SamplingParams& p) { p.min_p = -0.1f; }, {"min_p", "[0, 1]"}},
      {[](SamplingParams& p) { p.min_p = 1.01f; }, {"min_p", "[0, 1]"}},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, {"repetition_penalty", "greater than zero"}},
      {[](SamplingParams& p) { p.repetition_penalty = kInf; }, {"repetition_penalty"}},
      {[](SamplingParams& p) { p.frequency_penalty = 2.5f; }, {"frequency_penalty", "[-2, 2]", "2.5"}},
      {[](SamplingParams& p) { p.frequency_penalty = kNaN; }, {"frequency_penalty"}},
      {[](SamplingParams& p) { p.presence_penalty = -2.01f; }, {"presence_penalty", "[-2, 2]"}},
      {[](SamplingParams& p) { p.logprobs = 21; }, {"logprobs", "20", "21"}},
      {[](SamplingParams& p) { p.logprobs = -2; }, {"logprobs", "-1"}},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.set(p);
    const std::string message = expect_error([&] { p.validate(); }, {});
    for (std::string_view part : c.parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << message << "' lacks '" << part << "'";
    }
    // Only the field at fault is named, so a user knows which one to fix.
    for (const char* other : {"temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                              "frequency_penalty", "presence_penalty", "logprobs"}) {
      if (std::string_view(other) != c.parts.front()) {
        EXPECT_EQ(message.find(other), std::string::npos) << message;
      }
    }
  }
}

TEST(SamplingParams, GreedyBelowVllmEpsilon) {
  SamplingParams p;
  for (float t : {0.0f, 1e-7f, 9.99e-6f}) {
    p.temperature = t;
    EXPECT_TRUE(p.is_greedy()) << t;
  }
  for (float t : {1e-5f, 0.1f, 1.0f}) {
    p.temperature = t;
    EXPECT_FALSE(p.is_greedy()) << t;
  }
}

TEST(TokenCounts, CountsPromptPresenceAndOutputOccurrences) {
  auto rng = fp4::testing::seeded_rng(1);
  const int64_t vocab = 50;
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<int32_t> prompt(40), output(60);
  for (auto& t : prompt) t = token(rng);
  for (auto& t : output) t = token(rng);
  TokenCounts counts(vocab);
  counts.add_prompt(prompt);
  for (int32_t t : output) counts.add_output(t);

  std::map<int32_t, int> expected_output;
  for (int32_t t : output) ++expected_output[t];
  int distinct = 0;
  for (int32_t v = 0; v < vocab; ++v) {
    const bool in_prompt = std::count(prompt.begin(), prompt.end(), v) > 0;
    EXPECT_EQ(counts.in_prompt(v), in_prompt) << v;
    EXPECT_EQ(counts.output_count(v), expected_output[v]) << v;
    distinct += in_prompt || expected_output[v] > 0;
  }
  EXPECT_EQ(counts.num_output_tokens(), 60);
  ASSERT_EQ(counts.seen_tokens().size(), static_cast<size_t>(distinct));
  for (size_t j = 0; j < counts.seen_tokens().size(); ++j) {
    const int32_t t = counts.seen_tokens()[j];
    EXPECT_EQ(counts.seen_entries()[j].in_prompt, counts.in_prompt(t));
    EXPECT_EQ(counts.seen_entries()[j].output_count, counts.output_count(t));
  }
}

TEST(TokenCounts, RejectsIdsOutsideTheVocabulary) {
  TokenCounts counts(10);
  expect_error([&] { counts.add_output(10); }, {"output", "token id 10", "[0, 10)"});
  const std::vector<int32_t> prompt = {3, -1};
  expect_error([&] { counts.add_prompt(prompt); }, {"prompt", "token id -1"});
  expect_error([] { TokenCounts bad(0); }, {"vocab_size", "positive"});
}

// The published SplitMix64 reference outputs (Vigna's splitmix64.c): seed 0 and seed 1234567.
TEST(RandomStream, MatchesPublishedSplitMix64Outputs) {
  EXPECT_EQ(random_bits(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(random_bits(0, 1), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(random_bits(0, 2), 0x06C45D188009454Full);
  EXPECT_EQ(random_bits(1234567, 0), 6457827717110365317ull);
  EXPECT_EQ(random_bits(1234567, 1), 3203168211198807973ull);
  EXPECT_EQ(random_bits(1234567, 2), 9817491932198370423ull);
}

// The counter form must equal the ordinary stateful generator at every step.
TEST(RandomStream, CounterFormEqualsTheSequentialGenerator) {
  auto rng = fp4::testing::seeded_rng(2);
  const uint64_t seed = rng();
  uint64_t state = seed;
  for (int64_t step = 0; step < 10000; ++step) {
    state += kSplitMix64Gamma;
    ASSERT_EQ(random_bits(seed, step), splitmix64_mix(state)) << "step " << step;
  }
}

TEST(RandomStream, UniformBelowStaysInRangeAndHitsBothEnds) {
  EXPECT_EQ(uniform_below(0, 7), 0u);
  EXPECT_EQ(uniform_below(~0ull, 7), 6u);
  auto rng = fp4::testing::seeded_rng(3);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t n = rng() >> (rng() % 64);
    if (n == 0) continue;
    ASSERT_LT(uniform_below(rng(), n), n);
  }
}

TEST(RandomStream, RequestSeedUsesTheGivenSeedElseDrawsOne) {
  SamplingParams p;
  p.seed = 42;
  EXPECT_EQ(request_seed(p), 42u);
  p.seed.reset();
  // Two 64-bit draws from the entropy source coincide with probability 2^-64.
  EXPECT_NE(request_seed(p), request_seed(p));
}

// sampling_weights.h bounds weight_exp's relative error on [-27.8, 0] by the Taylor remainder
// |r|^12/12! e^|r| <= 8.9e-15 (|r| <= ln2/2) plus about a dozen roundings of 2^-53 each
// (1.4e-15): below 1e-14. The reference exp in long double adds 2^-64.
TEST(Weights, ExpIsAccurateAndWeightsSpanZeroToOne) {
  auto rng = fp4::testing::seeded_rng(4);
  std::uniform_real_distribution<double> d(kZeroWeightBelow, 0.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = i < 3 ? std::array{0.0, kZeroWeightBelow, -0.5 * std::log(2.0)}[i] : d(rng);
    const long double ref = std::exp(static_cast<long double>(x));
    ASSERT_LE(std::abs((weight_exp(x) - ref) / ref), 1e-14L) << "d = " << x;
  }
  EXPECT_EQ(token_weight(3.5f, 3.5f), uint64_t{1} << kWeightFractionBits);
  EXPECT_EQ(token_weight(-1.0f, 27.0f), 0u);  // d = -28
  EXPECT_EQ(token_weight(-std::numeric_limits<float>::infinity(), 0.0f), 0u);
  // e^-27.7 * 2^40 = 1.03: the last nonzero weight.
  EXPECT_EQ(token_weight(-27.7f, 0.0f), 1u);
  // Nonincreasing as x falls below the maximum.
  uint64_t previous = token_weight(0.0f, 0.0f);
  for (float x = -0.01f; x > -28.0f; x -= 0.01f) {
    const uint64_t w = token_weight(x, 0.0f);
    ASSERT_LE(w, previous) << "x = " << x;
    previous = w;
  }
}

}  // namespace
}  // namespace fp4::sampling
