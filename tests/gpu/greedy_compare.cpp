#include "tests/gpu/greedy_compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace fp4::engine {

using kvcache::PageDType;

Greedy run(const LoadedModel& m, PageDType cache, const std::vector<int32_t>& prompt, int64_t steps, bool eager,
           int64_t* recorded, AttentionOperands operands, bool keep_selections, GenerateResult* result,
           const GenerateResult* follow) {
  GeneratorOptions o;
  o.cache = {cache, cache};
  o.cache.attention_operands = operands;
  o.prefill_chunk = 2048;
  o.enforce_eager = eager;
  Generator g(m, o, static_cast<int64_t>(prompt.size()) + steps);
  GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = steps;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.keep_logits = true;
  r.keep_selections = keep_selections;
  r.follow = follow;
  GenerateResult res = g.generate(r);
  if (recorded != nullptr) *recorded = g.runner().recorded_graphs();
  if (result != nullptr) *result = res;
  return {std::move(res.tokens), std::move(res.step_logits), std::move(res.prompt_selection),
          std::move(res.step_selections), std::move(res.step_routes), std::move(res.prompt_routes)};
}

double budget(PageDType cache, const LoadedModel& m) {
  if (cache == PageDType::kFP8 || cache == PageDType::kNVFP4) return 0x1p-5;
  if (cache == PageDType::kBF16) return 0x1p-6;
  bool w4a16 = false;
  for (const model::LayerWeights& l : m.weights.layers) w4a16 |= l.moe && l.moe_weights.nvfp4;
  return w4a16 ? 0x1p-7 : 0x1p-10;
}

int64_t differing_ids(const std::vector<std::vector<int32_t>>& a, const std::vector<std::vector<int32_t>>& b) {
  int64_t n = 0;
  for (size_t l = 0; l < std::min(a.size(), b.size()); ++l) {
    for (size_t i = 0; i < std::min(a[l].size(), b[l].size()); ++i) n += a[l][i] != b[l][i];
  }
  return n;
}

int64_t expect_same_greedy(const Greedy& cpu, const Greedy& gpu, int64_t vocab, double rel,
                           const std::string& what, bool strict) {
  EXPECT_EQ(cpu.tokens.size(), gpu.tokens.size()) << what;
  double worst = 0;
  int64_t step = 0;
  const auto selections = static_cast<int64_t>(std::min(cpu.selections.size(), gpu.selections.size()));
  const auto routes = static_cast<int64_t>(std::min(cpu.routes.size(), gpu.routes.size()));
  if (strict && cpu.prompt_routes != gpu.prompt_routes) {
    std::printf("[  NOTE    ] %s: the prompt's routing differs in %lld expert ids; a near-tie rule from here\n",
                what.c_str(), static_cast<long long>(differing_ids(cpu.prompt_routes, gpu.prompt_routes)));
    strict = false;
  }
  for (; step < static_cast<int64_t>(std::min(cpu.tokens.size(), gpu.tokens.size())); ++step) {
    if (strict && step < selections && cpu.selections[step] != gpu.selections[step]) {
      std::printf("[  NOTE    ] %s: step %lld's selection differs in %lld ids; a near-tie rule from here\n",
                  what.c_str(), static_cast<long long>(step),
                  static_cast<long long>(differing_ids(cpu.selections[step], gpu.selections[step])));
      strict = false;
    }
    if (strict && step < routes && cpu.routes[step] != gpu.routes[step]) {
      std::printf("[  NOTE    ] %s: step %lld's routing differs in %lld expert ids; a near-tie rule from here\n",
                  what.c_str(), static_cast<long long>(step),
                  static_cast<long long>(differing_ids(cpu.routes[step], gpu.routes[step])));
      strict = false;
    }
    const float* c = &cpu.logits[step * vocab];
    const float* g = &gpu.logits[step * vocab];
    double scale = 0, diff = 0, best = -INFINITY, second = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) {
      scale = std::max(scale, std::abs(double{c[v]}));
      diff = std::max(diff, std::abs(double{g[v]} - c[v]));  // NaN fails below
      if (c[v] > best) {
        second = best;
        best = c[v];
      } else if (c[v] > second) {
        second = c[v];
      }
    }
    const double tol = rel * scale;
    worst = std::max(worst, diff / scale);
    if (strict) {
      EXPECT_LE(diff, tol) << what << ": step " << step << " logits differ by " << diff << " (largest |logit| "
                           << scale << ")";
      if (!(diff <= tol)) break;
    }
    if (cpu.tokens[step] != gpu.tokens[step]) {
      EXPECT_LE(best - second, tol) << what << ": step " << step << " GPU chose " << gpu.tokens[step]
                                    << ", CPU " << cpu.tokens[step] << ", whose margin is " << best - second;
      std::printf("[  NOTE    ] %s: paths part at step %lld at a near-tie (margin %.3g)\n", what.c_str(),
                  static_cast<long long>(step), best - second);
      break;
    }
  }
  std::printf("[  CHECKED ] %s: %lld steps, largest logit difference %.3g of the largest |logit| (budget %.3g)\n",
              what.c_str(), static_cast<long long>(step), worst, rel);
  return step;
}

}  // namespace fp4::engine
