// Temperature, top-k, top-p and min-p: the sampler's exact distribution against the real-valued
// reference, and the frequencies of drawn tokens against the reference distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "sampling/sampler.h"
#include "tests/support/random.h"
#include "tests/unit/sampling/reference.h"

namespace fp4::sampling {
namespace {

using fp4::testing::Distribution;
using fp4::testing::random_floats;
using testing::expect_frequencies;
using testing::History;
using testing::ReferenceDistribution;

struct Case {
  std::vector<float> logits;
  ReferenceDistribution ref;
};

// Random logits (spread * N(0,1), on a grid of 1/4 when `ties`, so equal logits meet the top-k
// and top-p boundaries) whose reference is clear of every threshold; with `need_excluded`, the
// filters must also drop at least one token, so the case exercises them.
Case make_case(int64_t vocab, const SamplingParams& p, const History& h, float spread, bool ties,
               bool need_excluded, std::mt19937_64& rng) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    Case c{random_floats(vocab, Distribution::kGaussian, rng), {}};
    for (float& v : c.logits) v = ties ? std::round(v * spread * 4.0f) / 4.0f : v * spread;
    c.ref = testing::reference_distribution(c.logits, p, h);
    bool excluded = false;
    for (double q : c.ref.probs) excluded |= q == 0.0;
    if (!c.ref.near_threshold && (excluded || !need_excluded)) return c;
  }
  ADD_FAILURE() << "no usable random logits in 100 attempts";
  return {};
}

// A weight is floor(weight_exp(d) * 2^40) / 2^40 where the reference uses e = exp(d); with
// weight_exp's relative error below 1e-14 (sampling_weights.h) each differs from e by less than
// 2^-40 + 1e-14 < 1.011 * 2^-40, and a sum of n by less than n times that. With W >= 1 (the
// maximum weighs 1):
//   |w/W' - e/W| <= |w - e|/W' + e |W - W'| / (W W') <= (1 + n) 1.011 2^-40 / (1 - n 1.011 2^-40),
// which for n <= 2^23 is below (n + 2) * 1.02 * 2^-40.
void expect_distribution_matches(const std::vector<double>& ours, const std::vector<double>& ref,
                                 const char* what) {
  ASSERT_EQ(ours.size(), ref.size());
  int64_t n = 0;
  for (double q : ref) n += q > 0.0;
  const double tol = static_cast<double>(n + 2) * 1.02 * 0x1p-40;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref[i] == 0.0) {
      ASSERT_EQ(ours[i], 0.0) << what << ": excluded token " << i << " has probability";
    } else {
      ASSERT_NEAR(ours[i], ref[i], tol) << what << ": token " << i;
    }
  }
}

SamplingParams random_params(int64_t vocab, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  SamplingParams p;
  p.temperature = 0.2f + 2.0f * u(rng);
  const int kind = static_cast<int>(rng() % 8);
  if (kind & 1) p.top_k = 1 + static_cast<int>(rng() % static_cast<uint64_t>(vocab));
  if (kind & 2) p.top_p = 0.05f + 0.95f * u(rng);
  if (kind & 4) p.min_p = 0.3f * u(rng);
  if (rng() % 2) {
    p.repetition_penalty = 0.5f + 1.5f * u(rng);
    p.frequency_penalty = 4.0f * u(rng) - 2.0f;
    p.presence_penalty = 4.0f * u(rng) - 2.0f;
  }
  return p;
}

TEST(Distribution, MatchesTheReferenceForRandomParameters) {
  auto rng = fp4::testing::seeded_rng(20);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t vocab = 2 + static_cast<int64_t>(rng() % 4000);
    const SamplingParams p = random_params(vocab, rng);
    History h;
    for (int i = 0; i < 30; ++i) h.output.push_back(static_cast<int32_t>(rng() % vocab));
    const TokenCounts counts = h.counts(vocab);
    const Case c = make_case(vocab, p, h, 1.0f + 3.0f * (trial % 3), trial % 2 == 0, false, rng);
    const std::vector<double> ours = sampling_distribution(c.logits, p, counts);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " vocab " << vocab << " T " << p.temperature
                                      << " top_k " << p.top_k << " top_p " << p.top_p << " min_p " << p.min_p);
    expect_distribution_matches(ours, c.ref.probs, "random parameters");
    // Whatever the seed, a drawn token is one the distribution allows.
    for (int d = 0; d < 8; ++d) {
      const int32_t token = sample(c.logits, p, counts, rng(), d).token;
      ASSERT_GT(ours[token], 0.0) << "drew excluded token " << token;
    }
  }
}

// A 200,064-token row with logits close together, so top-p keeps tens of thousands of tokens
// and its boundary search runs many rounds.
TEST(Distribution, MatchesTheReferenceOnAFullSizeVocabulary) {
  auto rng = fp4::testing::seeded_rng(21);
  const int64_t vocab = 200064;
  const TokenCounts counts(vocab);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int trial = 0; trial < 4; ++trial) {
    SamplingParams p;
    p.temperature = 0.7f + 0.6f * u(rng);
    p.top_p = 0.3f + 0.69f * u(rng);
    if (trial % 2) p.top_k = 150000, p.min_p = 0.2f * u(rng);
    const Case c = make_case(vocab, p, {}, 0.5f, trial >= 2, true, rng);
    expect_distribution_matches(sampling_distribution(c.logits, p, counts), c.ref.probs, "full vocabulary");
  }
}

// Draws the row `draws` times (steps 0..draws-1 of one seed) and checks frequencies.
void check_draws(const Case& c, const SamplingParams& p, std::mt19937_64& rng, int64_t draws = 100000) {
  const TokenCounts counts(static_cast<int64_t>(c.logits.size()));
  expect_frequencies(testing::draw_counts(c.logits, p, counts, rng(), draws), c.ref.probs, draws);
}

// Frequencies with temperature T follow softmax(logits / T). Failure probability when correct:
// delta = 1e-6 (expect_frequencies); a wrong temperature moves these probabilities by far more
// than the bound of about 4 sqrt(N q) counts.
TEST(Frequencies, FollowTheTemperatureScaledSoftmax) {
  auto rng = fp4::testing::seeded_rng(22);
  for (float t : {0.35f, 1.0f, 2.5f}) {
    SamplingParams p;
    p.temperature = t * std::uniform_real_distribution<float>(0.9f, 1.1f)(rng);
    SCOPED_TRACE(::testing::Message() << "temperature " << p.temperature);
    check_draws(make_case(8, p, {}, 1.5f, false, false, rng), p, rng);
  }
}

TEST(Frequencies, TopKDrawsOnlyTheKBestRenormalized) {
  auto rng = fp4::testing::seeded_rng(23);
  SamplingParams p;
  p.temperature = 0.8f;
  for (int k : {1, 3, 6}) {
    p.top_k = k;
    SCOPED_TRACE(::testing::Message() << "top_k " << k);
    check_draws(make_case(16, p, {}, 1.0f, k == 3, true, rng), p, rng);
  }
}

TEST(Frequencies, TopPDrawsOnlyTheSmallestSufficientSetRenormalized) {
  auto rng = fp4::testing::seeded_rng(24);
  SamplingParams p;
  for (float top_p : {0.3f, 0.7f, 0.95f}) {
    p.top_p = top_p;
    SCOPED_TRACE(::testing::Message() << "top_p " << top_p);
    check_draws(make_case(16, p, {}, 1.5f, top_p == 0.7f, true, rng), p, rng);
  }
}

TEST(Frequencies, MinPDrawsOnlyTokensNearTheBestRenormalized) {
  auto rng = fp4::testing::seeded_rng(25);
  SamplingParams p;
  p.temperature = 1.2f;
  for (float min_p : {0.05f, 0.2f, 0.6f}) {
    p.min_p = min_p;
    SCOPED_TRACE(::testing::Message() << "min_p " << min_p);
    check_draws(make_case(16, p, {}, 1.5f, false, true, rng), p, rng);
  }
}

TEST(Frequencies, AllFiltersTogetherWithPenalties) {
  auto rng = fp4::testing::seeded_rng(26);
  SamplingParams p;
  p.temperature = 0.9f, p.top_k = 10, p.top_p = 0.85f, p.min_p = 0.05f;
  p.repetition_penalty = 1.3f, p.frequency_penalty = 0.4f, p.presence_penalty = -0.3f;
  History h{{1, 2, 3}, {3, 3, 4, 9}};
  const Case c = make_case(16, p, h, 1.5f, false, true, rng);
  expect_frequencies(testing::draw_counts(c.logits, p, h.counts(16), rng(), 100000), c.ref.probs, 100000);
}

}  // namespace
}  // namespace fp4::sampling
