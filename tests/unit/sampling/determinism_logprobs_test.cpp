// Seeded draws as a pure function of (seed, step), batching, and raw logprobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "sampling/logprobs.h"
#include "sampling/sampler.h"
#include "tests/support/random.h"
#include "tests/unit/sampling/reference.h"

namespace fp4::sampling {
namespace {

using fp4::testing::Distribution;
using fp4::testing::random_floats;
using testing::History;

TEST(Seeds, SameSeedAndStepGiveTheSameTokenInAnyBatch) {
  auto rng = fp4::testing::seeded_rng(30);
  const int64_t vocab = 3000;
  const int rows = 24;
  const std::vector<float> logits = random_floats(vocab * rows, Distribution::kGaussian, rng);
  std::vector<SamplingParams> params(rows);
  std::vector<TokenCounts> counts;
  std::vector<SampleRequest> requests(rows);
  for (int i = 0; i < rows; ++i) {
    params[i].temperature = 0.5f + 0.1f * static_cast<float>(i % 10);
    params[i].top_k = i % 3 == 0 ? 50 : -1;
    params[i].top_p = i % 4 == 0 ? 0.9f : 1.0f;
    params[i].logprobs = i % 5;
    counts.emplace_back(vocab);
  }
  for (int i = 0; i < rows; ++i) requests[i] = {&params[i], &counts[i], rng(), static_cast<int64_t>(rng() % 1000)};
  const auto row = [&](int i) { return std::span<const float>(logits).subspan(i * vocab, vocab); };

  std::vector<SampleResult> alone;
  for (int i = 0; i < rows; ++i) {
    alone.push_back(sample(row(i), params[i], counts[i], requests[i].seed, requests[i].step));
    ASSERT_EQ(sample(row(i), params[i], counts[i], requests[i].seed, requests[i].step).token, alone[i].token);
  }
  // The same rows in a shuffled batch, on one and on several threads.
  std::vector<int> order(rows);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<float> shuffled;
  std::vector<SampleRequest> shuffled_requests;
  for (int i : order) {
    shuffled.insert(shuffled.end(), row(i).begin(), row(i).end());
    shuffled_requests.push_back(requests[i]);
  }
  for (int threads : {1, 4}) {
    const auto batch = sample_batch(shuffled, vocab, shuffled_requests, threads);
    for (int j = 0; j < rows; ++j) {
      const SampleResult& a = alone[order[j]];
      EXPECT_EQ(batch[j].token, a.token) << "row " << order[j] << " threads " << threads;
      EXPECT_EQ(batch[j].logprob, a.logprob);
      EXPECT_EQ(batch[j].top_logprobs, a.top_logprobs);
    }
  }
}

// A request that is preempted after k tokens and recomputed (its counts rebuilt from the prompt
// and the tokens it kept) continues with exactly the tokens it would have produced.
TEST(Seeds, ARecomputedRequestContinuesItsSequence) {
  auto rng = fp4::testing::seeded_rng(31);
  const int64_t vocab = 500;
  const int steps = 60;
  // One logits row per step, as a model would produce.
  const std::vector<float> logits = random_floats(vocab * steps, Distribution::kGaussian, rng);
  SamplingParams p;
  p.temperature = 1.3f, p.top_p = 0.95f, p.repetition_penalty = 1.2f, p.frequency_penalty = 0.5f;
  p.seed = rng();
  const uint64_t seed = request_seed(p);
  const std::vector<int32_t> prompt = {1, 2, 3, 4};

  const auto run = [&](int64_t from, const std::vector<int32_t>& before) {
    TokenCounts counts(vocab);
    counts.add_prompt(prompt);
    for (int32_t t : before) counts.add_output(t);
    std::vector<int32_t> out = before;
    for (int64_t step = from; step < steps; ++step) {
      const auto row = std::span<const float>(logits).subspan(step * vocab, vocab);
      out.push_back(sample(row, p, counts, seed, step).token);
      counts.add_output(out.back());
    }
    return out;
  };
  const std::vector<int32_t> full = run(0, {});
  for (int k : {1, 17, 59}) {
    EXPECT_EQ(run(k, std::vector<int32_t>(full.begin(), full.begin() + k)), full) << "resumed at " << k;
  }
}

TEST(Seeds, DifferentSeedsDiverge) {
  auto rng = fp4::testing::seeded_rng(32);
  const int64_t vocab = 8;
  const std::vector<float> logits = random_floats(vocab, Distribution::kGaussian, rng);
  SamplingParams p;
  const TokenCounts counts(vocab);
  // Two independent 64-token sequences agree everywhere with probability (sum q_i^2)^64.
  const auto probs = sampling_distribution(logits, p, counts);
  double collision = 0.0;
  for (double q : probs) collision += q * q;
  ASSERT_LT(std::pow(collision, 64.0), 1e-9) << "logits too peaked for this check";
  const uint64_t a = rng(), b = a ^ (1ull << (rng() % 64));  // seeds one bit apart
  bool differ = false;
  for (int64_t step = 0; step < 64; ++step) {
    differ |= sample(logits, p, counts, a, step).token != sample(logits, p, counts, b, step).token;
  }
  EXPECT_TRUE(differ);
}

// Reference log_softmax in long double (64-bit mantissa).
std::vector<long double> reference_logprobs(const std::vector<float>& l) {
  const long double m = *std::max_element(l.begin(), l.end());
  long double s = 0.0L;
  for (float v : l) s += std::exp(static_cast<long double>(v) - m);
  std::vector<long double> out;
  for (float v : l) out.push_back((static_cast<long double>(v) - m) - std::log(s));
  return out;
}

// The sampler computes in double, then rounds to float. Double errors: the subtraction l - M is
// exact or rounded by 2^-53 |l - M|; each exp is within 2^-52 relative and summing V positive
// terms adds (V - 1) 2^-53 relative to S, so log S is off by at most (V + 1) 2^-52 + 2^-53 |log S|.
// Altogether below 2^-52 (V + 2 + |l - M| + |log S|) = e_d; the reference's own error (2^-64 scale)
// is covered by doubling it. Rounding to float adds half an ulp of the result:
//   |ours - ref| <= ulp_f(|ref| + e_d) / 2 + 2 e_d.
double logprob_tolerance(long double ref, double spread, int64_t vocab) {
  const double e_d = 0x1p-52 * (static_cast<double>(vocab) + 2.0 + spread);
  const float mag = static_cast<float>(std::abs(static_cast<double>(ref)) + e_d);
  const float up = std::nextafter(std::nextafter(mag, INFINITY), INFINITY);
  return static_cast<double>(up - std::nextafter(up, 0.0f)) / 2.0 + 2.0 * e_d;
}

TEST(Logprobs, AreTheRawLogSoftmaxWithRankAndTopListTiesToLowerIds) {
  auto rng = fp4::testing::seeded_rng(33);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t vocab = 50 + static_cast<int64_t>(rng() % 5000);
    std::vector<float> logits = random_floats(vocab, Distribution::kStudentT3, rng);
    for (float& v : logits) v *= 3.0f;
    // Ties among the best tokens and unreachable tokens.
    const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    for (int c = 0; c < 3; ++c) logits[rng() % vocab] = logits[best];
    logits[rng() % vocab] = ninf;
    SamplingParams p;
    p.logprobs = static_cast<int>(rng() % (kMaxLogprobs + 1));
    // Penalties and temperature change the draw but not the reported (raw) logprobs.
    p.temperature = trial % 3 == 0 ? 0.0f : 0.4f;
    p.repetition_penalty = 1.5f, p.presence_penalty = 1.0f;
    History h{{static_cast<int32_t>(best)}, {static_cast<int32_t>(rng() % vocab)}};
    const SampleResult r = sample(logits, p, h.counts(vocab), rng(), trial);

    const auto ref = reference_logprobs(logits);
    const long double spread = -*std::min_element(ref.begin(), ref.end(), [](long double a, long double b) {
      return std::isfinite(a) && (!std::isfinite(b) || a < b);
    });
    const auto expect_close = [&](int32_t id, float got) {
      if (std::isinf(ref[id])) {
        EXPECT_EQ(got, ninf) << "token " << id;
      } else {
        EXPECT_NEAR(got, static_cast<double>(ref[id]),
                    logprob_tolerance(ref[id], static_cast<double>(spread), vocab)) << "token " << id;
      }
    };
    expect_close(r.token, r.logprob);

    // Rank and top list from the sampler's own logprob of every token (so the check is about
    // ordering, not rounding): rank counts strictly higher ones, the list is the first
    // `logprobs` ids by (logprob descending, id ascending).
    const RawLogprobs lp(logits);
    std::vector<int32_t> ids(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return lp(a) > lp(b); });
    int higher = 0;
    for (int32_t id : ids) higher += lp(id) > r.logprob;
    EXPECT_EQ(r.rank, 1 + higher);
    EXPECT_EQ(r.logprob, lp(r.token));
    ASSERT_EQ(r.top_logprobs.size(), static_cast<size_t>(p.logprobs));
    for (int j = 0; j < p.logprobs; ++j) {
      EXPECT_EQ(r.top_logprobs[j].first, ids[j]) << "entry " << j;
      expect_close(r.top_logprobs[j].first, r.top_logprobs[j].second);
    }
  }
}

TEST(Logprobs, NoneRequestedLeavesRankZero) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  const SampleResult r = sample(logits, p, TokenCounts(3), 0, 0);
  EXPECT_EQ(r.token, 1);
  EXPECT_EQ(r.rank, 0);
  EXPECT_TRUE(r.top_logprobs.empty());
  p.logprobs = 0;
  const SampleResult with = sample(logits, p, TokenCounts(3), 0, 0);
  EXPECT_EQ(with.rank, 1);
  EXPECT_TRUE(with.top_logprobs.empty());
  // log_softmax by hand: 2 - log(e^0.5 + e^2 + e^-1) = -0.2414 in double; the float result is
  // within half an ulp (2^-27 = 7.5e-9 in [1/8, 1/4)) plus double-rounding noise (~1e-16).
  EXPECT_NEAR(with.logprob, 2.0 - std::log(std::exp(0.5) + std::exp(2.0) + std::exp(-1.0)), 1e-8);
}

}  // namespace
}  // namespace fp4::sampling
