#include "engine/device_sampler.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <string>

#include "backend/buffer.h"
#include "core/check.h"

namespace fp4::engine {
namespace {

// Every input of the op goes to the device in one copy and every output comes back in one: a
// step's sampling then costs two transfers, not a dozen, each of which waits on the host.
// Inputs: the rows (8-byte aligned at the start), then the int32 arrays, then the prompt flags.
// Outputs: token, rank and top ids (int32), then logprob and top logprobs (float bits).
class Packing {
 public:
  template <typename T>
  size_t add(const std::vector<T>& v) {
    const size_t at = (bytes_.size() + alignof(T) - 1) / alignof(T) * alignof(T);
    bytes_.resize(at + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(bytes_.data() + at, v.data(), v.size() * sizeof(T));
    return at;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// The op and the host sampler must mean the same by these.
static_assert(kMaxSampleLogprobs == sampling::kMaxLogprobs);
static_assert(kSampleGreedyBelow == sampling::kSamplingEps);

// Why the op refused a row (the parameters were validated at admission, so the logits): its
// logits come to the host only on this failure path.
std::string refusal(Backend& backend, const float* row, int64_t vocab) {
  std::vector<float> host(static_cast<size_t>(vocab));
  backend.copy_to_host(host.data(), row, host.size() * sizeof(float));
  for (int64_t t = 0; t < vocab; ++t) {
    if (!(host[t] < std::numeric_limits<float>::infinity())) {
      return fmt::format("the logit of token {} is {}; expected a finite value or -inf", t, host[t]);
    }
  }
  return "every logit is -inf after the banned ids, penalties and temperature";
}

}  // namespace

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
  Packing in;
  const size_t rows_at = in.add(params), tokens_at = in.add(seen_tokens), counts_at = in.add(seen_counts),
               banned_at = in.add(banned), prompt_at = in.add(seen_in_prompt);
  const Buffer<uint8_t> d_in(backend, in.bytes());
  const uint8_t* base = d_in.data();

  constexpr int64_t kTop = kMaxSampleLogprobs;
  const int64_t ints = n * (2 + kTop), out_words = ints + n * (1 + kTop);
  Buffer<int32_t> d_out(backend, static_cast<size_t>(out_words));
  int32_t* out = d_out.data();
  float* out_floats = reinterpret_cast<float*>(out + ints);
  Buffer<float> scratch(backend, static_cast<size_t>(n * vocab));
  backend.sample({.logits = logits, .rows = n, .vocab = vocab,
                  .row = reinterpret_cast<const SampleRow*>(base + rows_at),
                  .seen_tokens = reinterpret_cast<const int32_t*>(base + tokens_at),
                  .seen_output_counts = reinterpret_cast<const int32_t*>(base + counts_at),
                  .seen_in_prompt = base + prompt_at,
                  .banned = reinterpret_cast<const int32_t*>(base + banned_at), .scratch = scratch.data(),
                  .token = out, .logprob = out_floats, .rank = out + n, .top_ids = out + 2 * n,
                  .top_logprobs = out_floats + n});
  const std::vector<int32_t> words = d_out.download();
  const int32_t* tokens = words.data();
  const int32_t* ranks = tokens + n;
  const int32_t* ids = tokens + 2 * n;
  std::vector<float> floats(static_cast<size_t>(n * (1 + kTop)));
  std::memcpy(floats.data(), words.data() + ints, floats.size() * sizeof(float));
  const float* lps = floats.data();
  const float* top_lps = lps + n;

  std::vector<sampling::SampleResult> results(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0) fail("sampling: row {} has no token that can be drawn: {}", i, refusal(backend, logits + i * vocab, vocab));
    sampling::SampleResult& s = results[i];
    s.token = tokens[i];
    if (params[i].logprobs < 0) continue;
    s.logprob = lps[i];
    s.rank = ranks[i];
    for (int64_t j = 0; j < params[i].logprobs && j < kTop; ++j) {
      const int32_t id = ids[i * kTop + j];
      if (id < 0) break;
      s.top_logprobs.emplace_back(id, top_lps[i * kTop + j]);
    }
  }
  return results;
}

}  // namespace fp4::engine
