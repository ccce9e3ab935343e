// The serving engine's device-sampling path (engine/device_sampler.cpp, LlmEngine::step) on a
// machine without a GPU: a CPU backend that claims to sample "on the device" and does so by
// rebuilding each row's request from the SampleParams it is handed and calling the host
// sampler. An engine on it must give every request exactly what the plain CPU engine gives (the
// same logits, the same sampler), so everything the path ships (parameters, seeds and steps,
// the seen-token lists the penalties need, the banned ids of min_tokens) and everything it
// brings back (tokens, logprobs, ranks, top lists) is checked bit for bit.
#include <gtest/gtest.h>

#include <limits>
#include <map>

#include "engine/engine.h"
#include "engine/generator.h"
#include "sampling/sampler.h"
#include "tests/support/random_model.h"

namespace fp4::engine {
namespace {

class HostSamplingBackend final : public cpu::CpuBackend {
 public:
  bool samples_on_device() const override { return true; }
  void sample(const SampleParams& p) override {
    check_sample_params(p);
    ++calls;
    for (int64_t i = 0; i < p.rows; ++i) {
      const SampleRow& r = p.row[i];
      const sampling::SamplingParams params{
          .temperature = r.temperature, .top_k = r.top_k, .top_p = r.top_p, .min_p = r.min_p,
          .repetition_penalty = r.repetition_penalty, .frequency_penalty = r.frequency_penalty,
          .presence_penalty = r.presence_penalty, .seed = r.seed, .logprobs = r.logprobs};
      sampling::TokenCounts counts(p.vocab);
      for (int32_t j = r.seen_begin; j < r.seen_begin + r.seen_count; ++j) {
        const int32_t t = p.seen_tokens[j];
        if (p.seen_in_prompt[j] != 0) counts.add_prompt(std::span<const int32_t>(&t, 1));
        for (int32_t c = 0; c < p.seen_output_counts[j]; ++c) counts.add_output(t);
      }
      std::vector<float> row(p.logits + i * p.vocab, p.logits + (i + 1) * p.vocab);
      for (int32_t j = r.banned_begin; j < r.banned_begin + r.banned_count; ++j) {
        row[p.banned[j]] = -std::numeric_limits<float>::infinity();
      }
      const sampling::SampleResult s = sampling::sample(row, params, counts, r.seed, r.step);
      p.token[i] = s.token;
      p.logprob[i] = s.logprob;
      p.rank[i] = s.rank;
      for (int j = 0; j < kMaxSampleLogprobs; ++j) {
        const bool have = j < std::ssize(s.top_logprobs);
        p.top_ids[i * kMaxSampleLogprobs + j] = have ? s.top_logprobs[j].first : -1;
        p.top_logprobs[i * kMaxSampleLogprobs + j] = have ? s.top_logprobs[j].second : 0.0f;
      }
    }
  }
  int64_t calls = 0;
};

std::map<RequestId, std::vector<TokenOutput>> serve(const LoadedModel& model, const std::vector<EngineRequest>& rs) {
  EngineConfig c;
  c.cache = {kvcache::PageDType::kNVFP4, kvcache::PageDType::kFP8};
  c.num_pages = 32;
  c.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 128};
  LlmEngine engine(model, c);
  for (size_t i = 0; i < rs.size(); ++i) engine.add_request(static_cast<RequestId>(i), rs[i]);
  std::map<RequestId, std::vector<TokenOutput>> out;
  for (int step = 0; engine.has_work(); ++step) {
    EXPECT_LT(step, 100000);
    for (const RequestOutput& o : engine.step()) out[o.id].push_back(o.tokens.at(0));
  }
  EXPECT_EQ(engine.metrics().kv_pages_used, 0) << "pages leaked";
  return out;
}

TEST(DeviceSampling, ShipsEveryRequestFieldAndBringsBackTheHostSamplersResult) {
  auto rng = testing::seeded_rng(31);
  const LoadedModel host = testing::random_model(testing::tiny_m3_config(), rng);
  const int64_t vocab = host.config.vocab_size;
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 10; ++i) {
    EngineRequest r;
    r.prompt = testing::random_prompt(5 + 37 * i, vocab, rng);
    r.max_tokens = 24;
    r.sampling.logprobs = i % 4 == 0 ? -1 : i % 4;  // none, 1, 2, 3 alternatives
    if (i % 2 == 0) {
      r.sampling.temperature = 0;
      r.ignore_eos = true;
    } else {
      r.sampling.temperature = 0.6f + 0.1f * i;
      r.sampling.seed = 77 + i;
      r.sampling.top_k = i == 3 ? 8 : -1;
      r.sampling.top_p = i == 5 ? 0.8f : 1.0f;
      r.sampling.min_p = i == 7 ? 0.1f : 0.0f;
      // Strong penalties, so that a lost seen-token list changes the tokens.
      r.sampling.repetition_penalty = 1.8f;
      r.sampling.frequency_penalty = 1.5f;
      r.sampling.presence_penalty = i == 9 ? -1.0f : 1.0f;
      r.min_tokens = 6;
      r.stop_token_ids = {static_cast<int32_t>(rng() % vocab), static_cast<int32_t>(rng() % vocab)};
    }
    requests.push_back(r);
  }
  const auto want = serve(host, requests);

  auto backend = std::make_unique<HostSamplingBackend>();
  const HostSamplingBackend* sampler = backend.get();
  const LoadedModel device = testing::same_model_on(host, std::move(backend));
  const auto got = serve(device, requests);
  EXPECT_GT(sampler->calls, 0) << "the engine never sampled through the backend";

  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, w] : want) {
    const auto& g = got.at(id);
    ASSERT_EQ(g.size(), w.size()) << "request " << id;
    for (size_t s = 0; s < w.size(); ++s) {
      EXPECT_EQ(g[s].token, w[s].token) << "request " << id << ", step " << s;
      EXPECT_EQ(g[s].logprob, w[s].logprob) << "request " << id << ", step " << s;
      EXPECT_EQ(g[s].rank, w[s].rank) << "request " << id << ", step " << s;
      EXPECT_EQ(g[s].top_logprobs, w[s].top_logprobs) << "request " << id << ", step " << s;
    }
  }
}

// The Generator (fp4serve generate) takes the same path unless it keeps the logits.
TEST(DeviceSampling, GeneratorDrawsTheHostSamplersTokens) {
  auto rng = testing::seeded_rng(32);
  const LoadedModel host = testing::random_model(testing::tiny_m3_config(), rng);
  auto backend = std::make_unique<HostSamplingBackend>();
  const HostSamplingBackend* sampler = backend.get();
  const LoadedModel device = testing::same_model_on(host, std::move(backend));
  GenerateRequest r;
  r.prompt = testing::random_prompt(150, host.config.vocab_size, rng);
  r.max_tokens = 20;
  r.min_tokens = 5;
  r.stop_token_ids = {r.prompt[3], r.prompt[7]};
  r.sampling.temperature = 0.9f;
  r.sampling.seed = 5;
  r.sampling.logprobs = 0;
  r.sampling.repetition_penalty = 1.5f;
  const GeneratorOptions options{.cache = {kvcache::PageDType::kNVFP4, kvcache::PageDType::kFP8}};
  Generator on_host(host, options, 1024), on_device(device, options, 1024);
  const GenerateResult want = on_host.generate(r), got = on_device.generate(r);
  EXPECT_GT(sampler->calls, 0) << "the Generator never sampled through the backend";
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.logprobs, want.logprobs);
  EXPECT_EQ(got.finish_reason, want.finish_reason);
}

}  // namespace
}  // namespace fp4::engine
