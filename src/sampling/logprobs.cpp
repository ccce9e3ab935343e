#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>

namespace fp4::sampling {

RawLogprobs::RawLogprobs(std::span<const float> logits) : logits_(logits) {
  float max = logits[0];
  for (float v : logits) max = std::max(max, v);
  max_ = max;
  // Double keeps the sum's rounding (at most about V * 2^-53 relative) far below a float ulp,
  // so the float logprobs are within about one rounding of exact.
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_);
  log_sum_ = std::log(sum);
}

float RawLogprobs::operator()(int32_t token) const {
  return static_cast<float>((static_cast<double>(logits_[token]) - max_) - log_sum_);
}

void fill_logprobs(std::span<const float> logits, int num_top, SampleResult& result) {
  const RawLogprobs logprob(logits);
  const float chosen = logprob(result.token);
  result.logprob = chosen;
  result.top_logprobs.clear();
  const size_t top = static_cast<size_t>(std::max(num_top, 0));
  result.top_logprobs.reserve(top + 1);
  int higher = 0;
  // One pass in ascending id: a token enters the top list only ahead of strictly smaller
  // logprobs, so among equal logprobs the lower id (seen first) stays ahead.
  for (size_t i = 0; i < logits.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const float v = logprob(id);
    if (v > chosen) ++higher;
    auto& list = result.top_logprobs;
    if (top == 0 || (list.size() == top && !(v > list.back().second))) continue;
    auto pos = std::find_if(list.begin(), list.end(), [v](const auto& e) { return e.second < v; });
    list.insert(pos, {id, v});
    if (list.size() > top) list.pop_back();
  }
  result.rank = 1 + higher;
}

}  // namespace fp4::sampling
