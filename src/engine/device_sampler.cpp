#include "engine/device_sampler.h"

#include <cstring>

#include "backend/buffer.h"
#include "core/check.h"

namespace fp4::engine {

std::vector<sampling::SampleResult> sample_on_device(Backend& backend, const float* logits, int64_t vocab,
                                                     std::span<const DeviceSampleRequest> rows) {
  const int64_t n = std::ssize(rows);
  if (n == 0) return {};
  std::vector<SampleRow> params(static_cast<size_t>(n));
  std::vector<int32_t> seen_tokens, seen_counts, banned;
  std::vector<uint8_t> seen_in_prompt;
  for (int64_t i = 0; i < n; ++i) {
    const DeviceSampleRequest& r = rows[i];
    const sampling::SamplingParams& p = *r.params;
    SampleRow& row = params[i];
    row = {.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p,
           .repetition_penalty = p.repetition_penalty, .frequency_penalty = p.frequency_penalty,
           .presence_penalty = p.presence_penalty, .logprobs = p.logprobs, .seed = r.seed, .step = r.step,
           .seen_begin = static_cast<int32_t>(seen_tokens.size()), .seen_count = 0,
           .banned_begin = static_cast<int32_t>(banned.size()), .banned_count = static_cast<int32_t>(r.banned.size())};
    // The seen tokens matter only to the penalties; a long prompt's are not shipped otherwise.
    if (p.has_penalties()) {
      const auto tokens = r.counts->seen_tokens();
      const auto entries = r.counts->seen_entries();
      row.seen_count = static_cast<int32_t>(tokens.size());
      for (size_t j = 0; j < tokens.size(); ++j) {
        seen_tokens.push_back(tokens[j]);
        seen_counts.push_back(entries[j].output_count);
        seen_in_prompt.push_back(entries[j].in_prompt ? 1 : 0);
      }
    }
    banned.insert(banned.end(), r.banned.begin(), r.banned.end());
  }
  std::vector<uint8_t> row_bytes(params.size() * sizeof(SampleRow));
  std::memcpy(row_bytes.data(), params.data(), row_bytes.size());
  const Buffer<uint8_t> d_rows(backend, row_bytes);
  const Buffer<int32_t> d_seen(backend, seen_tokens), d_counts(backend, seen_counts), d_banned(backend, banned);
  const Buffer<uint8_t> d_in_prompt(backend, seen_in_prompt);
  Buffer<float> scratch(backend, static_cast<size_t>(n * vocab));
  Buffer<int32_t> token(backend, static_cast<size_t>(n)), rank(backend, static_cast<size_t>(n));
  Buffer<float> logprob(backend, static_cast<size_t>(n));
  Buffer<int32_t> top_ids(backend, static_cast<size_t>(n * kMaxSampleLogprobs));
  Buffer<float> top_logprobs(backend, static_cast<size_t>(n * kMaxSampleLogprobs));
  backend.sample({.logits = logits, .rows = n, .vocab = vocab,
                  .row = reinterpret_cast<const SampleRow*>(d_rows.data()), .seen_tokens = d_seen.data(),
                  .seen_output_counts = d_counts.data(), .seen_in_prompt = d_in_prompt.data(),
                  .banned = d_banned.data(), .scratch = scratch.data(), .token = token.data(),
                  .logprob = logprob.data(), .rank = rank.data(), .top_ids = top_ids.data(),
                  .top_logprobs = top_logprobs.data()});
  const std::vector<int32_t> tokens = token.download(), ranks = rank.download(), ids = top_ids.download();
  const std::vector<float> lps = logprob.download(), top_lps = top_logprobs.download();

  std::vector<sampling::SampleResult> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    FP4_CHECK(tokens[i] >= 0, "sampling: row {} has no token that can be drawn (every logit -inf after the "
              "banned ids, penalties and temperature)", i);
    sampling::SampleResult& s = out[i];
    s.token = tokens[i];
    if (params[i].logprobs < 0) continue;
    s.logprob = lps[i];
    s.rank = ranks[i];
    for (int64_t j = 0; j < params[i].logprobs && j < kMaxSampleLogprobs; ++j) {
      const int32_t id = ids[i * kMaxSampleLogprobs + j];
      if (id < 0) break;
      s.top_logprobs.emplace_back(id, top_lps[i * kMaxSampleLogprobs + j]);
    }
  }
  return out;
}

}  // namespace fp4::engine
