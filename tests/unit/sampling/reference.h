// Slow, plainly written references for the sampling tests: penalties over dense per-token loops,
// the filtered distribution in double by full sorting (no fixed-point weights), and a frequency
// check of drawn tokens against a distribution with a derived bound.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "sampling/sampler.h"

namespace fp4::sampling::testing {

struct History {
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;

  TokenCounts counts(int64_t vocab) const {
    TokenCounts c(vocab);
    c.add_prompt(prompt);
    for (int32_t t : output) c.add_output(t);
    return c;
  }
};

// vLLM's dense form: every token gets the repetition factor when it occurs anywhere, then
// frequency times its output count and presence times its output mask are subtracted.
inline std::vector<float> reference_penalties(std::span<const float> logits, const SamplingParams& p,
                                              const History& h) {
  std::vector<float> out(logits.begin(), logits.end());
  for (size_t v = 0; v < out.size(); ++v) {
    const int32_t id = static_cast<int32_t>(v);
    const bool in_prompt = std::count(h.prompt.begin(), h.prompt.end(), id) > 0;
    const auto count = std::count(h.output.begin(), h.output.end(), id);
    float l = out[v];
    if (in_prompt || count > 0) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    l = l - p.frequency_penalty * static_cast<float>(count);
    l = l - p.presence_penalty * (count > 0 ? 1.0f : 0.0f);
    out[v] = l;
  }
  return out;
}

struct ReferenceDistribution {
  std::vector<double> probs;
  // A top-p or min-p comparison fell so close to its threshold that the reference and the
  // sampler may legitimately decide differently (distances in units of the best token's
  // weight, 1). Min-p compares single weights, each off from exp by under 1.011 * 2^-40
  // (sampling_weights.h): margin 1e-11. Top-p compares running sums of n weights and a target p * W:
  // the sampler's are off from exact by under n * 1.011 * 2^-40, the reference's double sums
  // by under (n + 1) * 2^-53 * W; the margin is twice their sum.
  bool near_threshold = false;
};

inline ReferenceDistribution reference_distribution(std::span<const float> logits, const SamplingParams& p,
                                                    const History& h) {
  constexpr double kMinPMargin = 1e-11;
  const std::vector<float> l = reference_penalties(logits, p, h);
  const size_t n = l.size();
  ReferenceDistribution ref;
  ref.probs.assign(n, 0.0);
  if (p.temperature < kSamplingEps) {
    ref.probs[std::max_element(l.begin(), l.end()) - l.begin()] = 1.0;  // first maximum
    return ref;
  }
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = l[i] / p.temperature;
  const float m = *std::max_element(x.begin(), x.end());
  std::vector<double> e(n);
  for (size_t i = 0; i < n; ++i) e[i] = std::exp(static_cast<double>(x[i]) - static_cast<double>(m));
  std::vector<bool> alive(n, true);
  if (p.top_k > 0 && p.top_k < static_cast<int>(n)) {
    std::vector<float> sorted = x;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    for (size_t i = 0; i < n; ++i) alive[i] = x[i] >= sorted[p.top_k - 1];
  }
  if (p.top_p < 1.0f) {
    std::vector<size_t> order;
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (alive[i]) order.push_back(i), total += e[i];
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    const double target = static_cast<double>(p.top_p) * total;
    const double count = static_cast<double>(order.size());
    const double margin = 2.0 * (count * 1.011 * 0x1p-40 + (count + 1.0) * 0x1p-53 * total);
    double cum = 0.0;
    bool done = false;
    for (size_t i : order) {
      if (done) {
        alive[i] = false;
        continue;
      }
      cum += e[i];
      ref.near_threshold |= std::abs(cum - target) <= margin;
      done = cum >= target;
    }
  }
  if (p.min_p > 0.0f) {
    for (size_t i = 0; i < n; ++i) {
      ref.near_threshold |= alive[i] && std::abs(e[i] - p.min_p) <= kMinPMargin;
      alive[i] = alive[i] && e[i] >= p.min_p;
    }
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += alive[i] ? e[i] : 0.0;
  for (size_t i = 0; i < n; ++i) ref.probs[i] = alive[i] ? e[i] / total : 0.0;
  return ref;
}

// Tokens drawn at steps 0..draws-1 of one seed, counted per id.
inline std::vector<int64_t> draw_counts(std::span<const float> logits, const SamplingParams& p,
                                        const TokenCounts& counts, uint64_t seed, int64_t draws) {
  std::vector<int64_t> hist(logits.size(), 0);
  for (int64_t step = 0; step < draws; ++step) ++hist[sample(logits, p, counts, seed, step).token];
  return hist;
}

// Checks counts of `draws` independent draws against probs. A token of probability 0 must never
// appear. For the others, the count X ~ Binomial(N, q) obeys Bernstein's inequality
//   P(|X - Nq| >= t) <= 2 exp(-t^2 / (2 (N q (1-q) + t/3))).
// Setting the right side to delta / B (a union bound over the B tokens) and solving for t:
//   t = L/3 + sqrt(L^2/9 + 2 L N q (1-q)),  L = ln(2B / delta),
// so the whole check fails with probability at most delta when the sampler is right. One more
// count of slack covers the difference between q (reference, real-valued) and the sampler's
// fixed-point probabilities, at most V * 2^-40 per token (N * V * 2^-40 < 1 here).
inline void expect_frequencies(const std::vector<int64_t>& hist, const std::vector<double>& probs,
                               int64_t draws, double delta = 1e-6) {
  const double big_b = static_cast<double>(probs.size());
  const double L = std::log(2.0 * big_b / delta);
  const double n = static_cast<double>(draws);
  for (size_t i = 0; i < probs.size(); ++i) {
    const double q = probs[i];
    if (q == 0.0) {
      EXPECT_EQ(hist[i], 0) << "token " << i << " is excluded but was drawn";
      continue;
    }
    const double t = L / 3.0 + std::sqrt(L * L / 9.0 + 2.0 * L * n * q * (1.0 - q)) + 1.0;
    EXPECT_LE(std::abs(static_cast<double>(hist[i]) - n * q), t)
        << "token " << i << ": drawn " << hist[i] << " times of " << draws << ", expected " << n * q;
  }
}

}  // namespace fp4::sampling::testing
