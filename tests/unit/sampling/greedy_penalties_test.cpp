// Greedy decoding and the penalties, against the dense references of reference.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "sampling/sampler.h"
#include "tests/support/expect_error.h"
#include "tests/support/random.h"
#include "tests/unit/sampling/reference.h"

namespace fp4::sampling {
namespace {

using fp4::testing::Distribution;
using fp4::testing::expect_error;
using fp4::testing::random_floats;
using testing::History;
using testing::reference_penalties;

int32_t first_argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Random history over a small id range so that prompt and output overlap and repeat.
History random_history(int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(std::min<int64_t>(vocab, 64)) - 1);
  std::uniform_int_distribution<int> length(0, 80);
  History h;
  h.prompt.resize(length(rng));
  h.output.resize(length(rng));
  for (auto& t : h.prompt) t = token(rng);
  for (auto& t : h.output) t = token(rng);
  return h;
}

TEST(Greedy, IsTheArgmaxWithTiesToTheLowestId) {
  auto rng = fp4::testing::seeded_rng(10);
  const TokenCounts none(1000);
  SamplingParams p;
  std::uniform_int_distribution<int> pick(0, 999);
  for (int trial = 0; trial < 200; ++trial) {
    auto logits = random_floats(1000, trial % 2 ? Distribution::kGaussian : Distribution::kStudentT3, rng);
    // Half the trials copy the maximum to a few other ids, so the tie rule decides.
    if (trial % 4 < 2) {
      const float max = *std::max_element(logits.begin(), logits.end());
      for (int c = 0; c < 3; ++c) logits[pick(rng)] = max;
    }
    p.temperature = std::array{0.0f, 1e-7f, 9.9e-6f}[trial % 3];
    // Greedy ignores the filters, as vLLM does.
    p.top_k = trial % 5 == 0 ? 1 : -1;
    p.top_p = trial % 7 == 0 ? 0.1f : 1.0f;
    const SampleResult r = sample(logits, p, none, rng(), trial);
    ASSERT_EQ(r.token, first_argmax(logits)) << "trial " << trial;
  }
}

TEST(Greedy, SkipsMinusInfinityAndRefusesRowsWithoutAFiniteValue) {
  const TokenCounts none(4);
  SamplingParams p;
  p.temperature = 0.0f;
  const float ninf = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(sample(std::vector<float>{ninf, -3.0f, ninf, -4.0f}, p, none, 0, 0).token, 1);
  expect_error([&] { sample(std::vector<float>(4, ninf), p, none, 0, 0); }, {"logit", "-inf"});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { sample(std::vector<float>{0.0f, nan, 1.0f, 2.0f}, p, none, 0, 0); },
               {"token 1", "nan"});
  expect_error([&] { sample(std::vector<float>{0.0f, 1.0f, 2.0f}, p, none, 0, 0); },
               {"3 values", "vocabulary of 4"});
}

// The fast path visits only seen tokens and the reference loops over every token; both follow
// the same IEEE operations in the same order, so they must agree bit for bit.
TEST(Penalties, MatchTheDenseReferenceExactly) {
  auto rng = fp4::testing::seeded_rng(11);
  std::uniform_real_distribution<float> rep(0.25f, 3.0f), pen(-2.0f, 2.0f);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t vocab = 100 + trial;
    auto logits = random_floats(vocab, Distribution::kStudentT3, rng);
    logits[trial % 50] = 0.0f;  // the l > 0 test must send 0 to the multiply branch
    const History h = random_history(vocab, rng);
    SamplingParams p;
    p.repetition_penalty = trial % 3 == 0 ? 1.0f : rep(rng);
    p.frequency_penalty = trial % 3 == 1 ? 0.0f : pen(rng);
    p.presence_penalty = pen(rng);
    std::vector<float> fast = logits;
    apply_penalties(fast, p, h.counts(vocab));
    const std::vector<float> ref = reference_penalties(logits, p, h);
    for (int64_t v = 0; v < vocab; ++v) {
      ASSERT_EQ(fast[v], ref[v]) << "token " << v << " trial " << trial;
    }
    // Greedy decoding sees the penalized row.
    p.temperature = 0.0f;
    ASSERT_EQ(sample(logits, p, h.counts(vocab), 0, 0).token, first_argmax(ref)) << "trial " << trial;
  }
}

// Hand-computed cases of each rule, so a shared misreading in the two codes above would show.
TEST(Penalties, FollowVllmRulesOnHandComputedValues) {
  TokenCounts counts(6);
  const std::vector<int32_t> prompt = {0, 1};
  counts.add_prompt(prompt);
  for (int32_t t : {1, 2, 2, 3}) counts.add_output(t);
  SamplingParams p;
  p.repetition_penalty = 2.0f, p.frequency_penalty = 0.5f, p.presence_penalty = 0.25f;
  std::vector<float> l = {4.0f, -4.0f, 4.0f, -1.0f, 4.0f, -4.0f};
  apply_penalties(l, p, counts);
  EXPECT_EQ(l[0], 2.0f);                   // prompt only: divided
  EXPECT_EQ(l[1], -8.0f - 0.5f - 0.25f);   // prompt and output once: multiplied, then both
  EXPECT_EQ(l[2], 2.0f - 1.0f - 0.25f);    // output twice
  EXPECT_EQ(l[3], -2.0f - 0.5f - 0.25f);   // output once, negative
  EXPECT_EQ(l[4], 4.0f);                   // unseen
  EXPECT_EQ(l[5], -4.0f);
}

}  // namespace
}  // namespace fp4::sampling
