#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "backend/sampling_rng.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "sampling/logprobs.h"

namespace fp4::sampling {
namespace {

struct Candidate {
  float x;
  int32_t id;
  uint64_t weight;
};

// The top-p order: x descending, then id ascending. A strict total order, so every algorithm
// that respects it resolves ties the same way.
bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.x > b.x || (a.x == b.x && a.id < b.id);
}

// Top-p bins tokens by d = x - m in steps of 1/128: bin = trunc(-d * 128). Every token of
// nonzero weight has d >= kZeroWeightBelow, so the bins below cover them all, and a larger x
// never lands in a later bin, so the bins split the top-p order into consecutive runs.
constexpr int kBinsPerUnit = 128;
constexpr int kTopPBins = static_cast<int>(-kZeroWeightBelow * kBinsPerUnit) + 1;

int top_p_bin(float x, float max_x) {
  return static_cast<int>(-(static_cast<double>(x) - static_cast<double>(max_x)) * kBinsPerUnit);
}

// Top-k up to this size keeps a heap of the k best in one pass; beyond it nth_element on a copy.
constexpr int kHeapTopK = 4096;

// Scratch kept per thread, so a warm thread samples a row without allocating.
struct Workspace {
  std::vector<float> row;        // penalized (and scaled) logits
  std::vector<float> select;     // top-k heap, or copy of the row
  std::vector<Candidate> kept;   // survivors, ascending id
  std::vector<Candidate> order;  // the top-p boundary bin's tokens
  std::vector<uint64_t> bin_mass = std::vector<uint64_t>(kTopPBins);
};

Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

void check_row(std::span<const float> logits, const TokenCounts& counts) {
  FP4_CHECK(static_cast<int64_t>(logits.size()) == counts.vocab_size(),
            "sampling: logits row has {} values but the token counts cover a vocabulary of {}",
            logits.size(), counts.vocab_size());
  FP4_CHECK(static_cast<int64_t>(logits.size()) <= kMaxVocab,
            "sampling: logits row has {} values; at most {} are supported", logits.size(), kMaxVocab);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // Branch-free scan; the slow search for the culprit runs only on failure.
  bool bad = false, any_finite = false;
  for (float v : logits) {
    bad |= !(v < kInf);  // NaN or +inf
    any_finite |= v > -kInf;
  }
  if (bad) {
    for (size_t i = 0; i < logits.size(); ++i) {
      FP4_CHECK(logits[i] < kInf, "sampling: logit of token {} is {}; expected a finite value or -inf", i,
                logits[i]);
    }
  }
  FP4_CHECK(any_finite, "sampling: every logit of the row is -inf; expected at least one finite value");
}

// Steps 1-2 of sampler.h: the row the filters see; the input itself when nothing changes it.
std::span<const float> prepare_row(std::span<const float> logits, const SamplingParams& params,
                                   const TokenCounts& counts, bool scale, Workspace& ws) {
  const bool penalize = params.has_penalties() && !counts.seen_tokens().empty();
  const bool divide = scale && params.temperature != 1.0f;
  if (!penalize && !divide) return logits;
  ws.row.assign(logits.begin(), logits.end());
  if (penalize) apply_penalties(ws.row, params, counts);
  if (divide) {
    for (float& v : ws.row) v = v / params.temperature;
  }
  return ws.row;
}

// Lowest id among the maxima; the maximum must be finite for the weights to be defined.
int32_t argmax(std::span<const float> x) {
  size_t best = 0;
  for (size_t i = 1; i < x.size(); ++i) {
    if (x[i] > x[best]) best = i;
  }
  FP4_CHECK(std::isfinite(x[best]),
            "sampling: the largest logit after penalties and temperature is {}; expected a finite value "
            "(a penalty or temperature overflowed, or every token is -inf)",
            x[best]);
  return static_cast<int32_t>(best);
}

// Step 4a: the k-th largest value of x.
float kth_largest(std::span<const float> x, int k, Workspace& ws) {
  std::vector<float>& h = ws.select;
  if (k > kHeapTopK) {
    h.assign(x.begin(), x.end());
    std::nth_element(h.begin(), h.begin() + (k - 1), h.end(), std::greater<float>());
    return h[k - 1];
  }
  // A min-heap of the k largest so far: most tokens only meet its top.
  h.assign(x.begin(), x.begin() + k);
  std::make_heap(h.begin(), h.end(), std::greater<float>());
  for (size_t i = k; i < x.size(); ++i) {
    if (x[i] > h.front()) {
      std::pop_heap(h.begin(), h.end(), std::greater<float>());
      h.back() = x[i];
      std::push_heap(h.begin(), h.end(), std::greater<float>());
    }
  }
  return h.front();
}

// Step 4b on ws.kept, whose weights are also summed per bin in ws.bin_mass. The boundary token
// lies in the first bin where the running mass reaches the target; only that bin is sorted.
void keep_top_p(float top_p, float max_x, Workspace& ws) {
  uint64_t total = 0;
  for (uint64_t mass : ws.bin_mass) total += mass;
  const double target = static_cast<double>(top_p) * static_cast<double>(total);
  const auto reached = [target](uint64_t mass) { return static_cast<double>(mass) >= target; };
  uint64_t below = 0;
  int bin = 0;
  while (bin < kTopPBins - 1 && !reached(below + ws.bin_mass[bin])) below += ws.bin_mass[bin++];
  ws.order.clear();
  for (const Candidate& c : ws.kept) {
    if (top_p_bin(c.x, max_x) == bin) ws.order.push_back(c);
  }
  std::sort(ws.order.begin(), ws.order.end(), ranks_before);
  const Candidate* boundary = nullptr;
  for (const Candidate& c : ws.order) {
    below += c.weight;
    if (reached(below)) {
      boundary = &c;
      break;
    }
  }
  if (boundary == nullptr) fail_internal("sampling: top-p found no boundary among {} survivors", ws.kept.size());
  const Candidate b = *boundary;
  std::erase_if(ws.kept, [&](const Candidate& c) { return ranks_before(b, c); });
}

// Steps 3-4: the survivors in ascending id with their weights. Tokens of weight 0 are left out
// at once: they can never be drawn and add nothing to any top-p sum.
const std::vector<Candidate>& survivors(std::span<const float> x, const SamplingParams& params,
                                        Workspace& ws) {
  const float max_x = x[argmax(x)];
  const int64_t vocab = static_cast<int64_t>(x.size());
  const bool top_k = params.top_k > 0 && params.top_k < vocab;
  const bool top_p = params.top_p < 1.0f;
  const float kth = top_k ? kth_largest(x, params.top_k, ws) : -std::numeric_limits<float>::infinity();
  if (top_p) std::fill(ws.bin_mass.begin(), ws.bin_mass.end(), 0);
  ws.kept.clear();
  for (int64_t i = 0; i < vocab; ++i) {
    if (!(x[i] >= kth)) continue;
    const uint64_t w = token_weight(x[i], max_x);
    if (w == 0) continue;
    ws.kept.push_back({x[i], static_cast<int32_t>(i), w});
    if (top_p) ws.bin_mass[top_p_bin(x[i], max_x)] += w;
  }
  if (top_p) keep_top_p(params.top_p, max_x, ws);
  if (params.min_p > 0.0f) {
    const double threshold = static_cast<double>(params.min_p) * kWeightOne;
    std::erase_if(ws.kept, [&](const Candidate& c) { return static_cast<double>(c.weight) < threshold; });
  }
  return ws.kept;
}

uint64_t total_weight(const std::vector<Candidate>& kept) {
  uint64_t total = 0;
  for (const Candidate& c : kept) total += c.weight;
  return total;
}

}  // namespace

void apply_penalties(std::span<float> logits, const SamplingParams& params, const TokenCounts& counts) {
  FP4_CHECK(static_cast<int64_t>(logits.size()) == counts.vocab_size(),
            "apply_penalties: logits row has {} values but the token counts cover a vocabulary of {}",
            logits.size(), counts.vocab_size());
  const auto tokens = counts.seen_tokens();
  const auto entries = counts.seen_entries();
  const float r = params.repetition_penalty;
  for (size_t j = 0; j < tokens.size(); ++j) {
    // Every seen token is in the prompt or the output, so the repetition penalty applies.
    float l = logits[tokens[j]];
    l = l > 0.0f ? l / r : l * r;
    if (const int32_t count = entries[j].output_count; count > 0) {
      l = l - params.frequency_penalty * static_cast<float>(count);
      l = l - params.presence_penalty;
    }
    logits[tokens[j]] = l;
  }
}

std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                                          const TokenCounts& counts) {
  params.validate();
  check_row(logits, counts);
  Workspace& ws = workspace();
  std::vector<double> probs(logits.size(), 0.0);
  if (params.is_greedy()) {
    probs[argmax(prepare_row(logits, params, counts, /*scale=*/false, ws))] = 1.0;
    return probs;
  }
  const auto& kept = survivors(prepare_row(logits, params, counts, /*scale=*/true, ws), params, ws);
  const double total = static_cast<double>(total_weight(kept));
  for (const Candidate& c : kept) probs[c.id] = static_cast<double>(c.weight) / total;
  return probs;
}

SampleResult sample(std::span<const float> logits, const SamplingParams& params,
                    const TokenCounts& counts, uint64_t seed, int64_t step) {
  params.validate();
  check_row(logits, counts);
  FP4_CHECK(step >= 0, "sampling: step (tokens sampled so far) must be non-negative, got {}", step);
  Workspace& ws = workspace();
  SampleResult result;
  if (params.is_greedy()) {
    result.token = argmax(prepare_row(logits, params, counts, /*scale=*/false, ws));
  } else {
    const auto& kept = survivors(prepare_row(logits, params, counts, /*scale=*/true, ws), params, ws);
    const uint64_t r = uniform_below(random_bits(seed, step), total_weight(kept));
    uint64_t running = 0;
    for (const Candidate& c : kept) {
      running += c.weight;
      if (running > r) {
        result.token = c.id;
        break;
      }
    }
    if (result.token < 0) fail_internal("sampling: draw {} fell outside the total weight", r);
  }
  if (params.logprobs >= 0) fill_logprobs(logits, params.logprobs, result);
  return result;
}

std::vector<SampleResult> sample_batch(std::span<const float> logits, int64_t vocab_size,
                                       std::span<const SampleRequest> rows, int num_threads) {
  FP4_CHECK(vocab_size > 0 && logits.size() == rows.size() * static_cast<size_t>(vocab_size),
            "sample_batch: logits hold {} values; expected {} rows of vocab_size {}", logits.size(),
            rows.size(), vocab_size);
  std::vector<SampleResult> results(rows.size());
  parallel_for(
      static_cast<int64_t>(rows.size()),
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const SampleRequest& row = rows[i];
          FP4_CHECK(row.params != nullptr && row.counts != nullptr,
                    "sample_batch: row {} lacks its params or token counts", i);
          results[i] = sample(logits.subspan(i * vocab_size, vocab_size), *row.params, *row.counts,
                              row.seed, row.step);
        }
      },
      num_threads);
  return results;
}

}  // namespace fp4::sampling
