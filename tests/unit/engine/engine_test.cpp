// The serving engine on a small random model: many requests batched together, with chunked
// prefill, prefix hits and preemption, must give each request exactly the tokens the one-at-a-
// time Generator gives it (the CPU forward computes each row independently, so batching changes
// no bit), and must return every page.
#include <gtest/gtest.h>

#include <thread>

#include "engine/async_engine.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "tests/support/expect_error.h"
#include "tests/support/random_model.h"

namespace fp4::engine {
namespace {

using testing::random_model;
using testing::random_prompt;
using testing::tiny_m3_config;

struct Case {
  EngineRequest request;
  std::vector<int32_t> expected;
};

// Requests with shared prefixes (so the prefix cache hits), greedy and seeded sampling, and
// lengths that cross page boundaries.
std::vector<Case> make_cases(const LoadedModel& model, std::mt19937_64& rng, int n) {
  const int64_t vocab = model.config.vocab_size;
  const std::vector<int32_t> shared = random_prompt(300, vocab, rng);
  std::vector<Case> cases;
  for (int i = 0; i < n; ++i) {
    EngineRequest r;
    r.max_tokens = 1 + rng() % 40;
    if (i < 2) {
      // Two prompts of two pages each that grow into a third page while decoding: in a pool of
      // four pages the second must be preempted.
      r.prompt = random_prompt(250, vocab, rng);
      r.max_tokens = 30;
    } else if (i % 3 == 0) {
      r.prompt = random_prompt(1 + rng() % 200, vocab, rng);
    } else {
      r.prompt.assign(shared.begin(), shared.begin() + 130 + rng() % 170);
      const auto tail = random_prompt(1 + rng() % 20, vocab, rng);
      r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    }
    r.ignore_eos = true;
    if (i % 2 == 0) {
      r.sampling.temperature = 0;
    } else {
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = rng();
    }
    cases.push_back({r, {}});
  }
  Generator alone(model, {.cache = {kvcache::PageDType::kNVFP4, kvcache::PageDType::kFP8}},
                  model.config.max_position_embeddings);
  for (Case& c : cases) {
    GenerateRequest g;
    g.prompt = c.request.prompt;
    g.max_tokens = c.request.max_tokens;
    g.sampling = c.request.sampling;
    g.ignore_eos = true;
    c.expected = alone.generate(g).tokens;
  }
  return cases;
}

EngineConfig small_pool(int64_t pages, int64_t budget, int64_t max_seqs) {
  EngineConfig c;
  c.cache = {kvcache::PageDType::kNVFP4, kvcache::PageDType::kFP8};
  c.num_pages = pages;
  c.scheduler = {.max_num_seqs = max_seqs, .max_num_batched_tokens = budget};
  return c;
}

TEST(Engine, BatchedRequestsGetTheTokensTheyGetAlone) {
  auto rng = testing::seeded_rng(1);
  const LoadedModel model = random_model(tiny_m3_config(), rng);
  const std::vector<Case> cases = make_cases(model, rng, 12);
  // 4 pages of 128 tokens: requests of up to ~360 tokens each, so decodes run out of pages and
  // preempt; a budget of 96 tokens splits every longer prompt into chunks.
  LlmEngine engine(model, small_pool(4, 96, 6));
  for (size_t i = 0; i < cases.size(); ++i) engine.add_request(static_cast<RequestId>(i), cases[i].request);
  std::map<RequestId, std::vector<int32_t>> got;
  std::map<RequestId, RequestOutput> last;
  for (int step = 0; engine.has_work(); ++step) {
    ASSERT_LT(step, 100000);
    for (RequestOutput& o : engine.step()) {
      ASSERT_EQ(o.tokens.size(), 1u);
      got[o.id].push_back(o.tokens[0].token);
      EXPECT_EQ(o.output_tokens, std::ssize(got[o.id]));
      last[o.id] = o;
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(got[i], cases[i].expected) << "request " << i;
    EXPECT_EQ(last[i].finish_reason, FinishReason::kLength);
  }
  const EngineMetrics& m = engine.metrics();
  EXPECT_GT(m.num_preemptions, 0) << "the pool was sized to force preemption";
  EXPECT_GT(m.prefix_cache_hits, 0);
  EXPECT_EQ(m.kv_pages_used, 0) << "pages leaked";
  EXPECT_EQ(m.num_running + m.num_waiting, 0);
  EXPECT_EQ(m.time_to_first_token.count, std::ssize(cases));
  EXPECT_EQ(m.requests_finished_length, std::ssize(cases));
}

TEST(Engine, StopTokensMinTokensAndAbort) {
  auto rng = testing::seeded_rng(2);
  const LoadedModel model = random_model(tiny_m3_config(), rng);
  LlmEngine engine(model, small_pool(16, 256, 8));
  EngineRequest r;
  r.prompt = random_prompt(20, model.config.vocab_size, rng);
  r.max_tokens = 30;
  r.sampling.temperature = 0;
  // Find the greedy continuation, then ask it to stop at its 5th token.
  engine.add_request(0, r);
  std::vector<int32_t> free_run;
  while (engine.has_work()) {
    for (const RequestOutput& o : engine.step()) free_run.push_back(o.tokens[0].token);
  }
  ASSERT_EQ(free_run.size(), 30u);
  const int32_t stop = free_run[4];
  const auto first = std::find(free_run.begin(), free_run.end(), stop) - free_run.begin();
  EngineRequest s = r;
  s.stop_token_ids = {stop};
  engine.add_request(1, s);
  std::vector<RequestOutput> outs;
  while (engine.has_work()) for (auto& o : engine.step()) outs.push_back(o);
  ASSERT_EQ(std::ssize(outs), first + 1);
  EXPECT_EQ(outs.back().finish_reason, FinishReason::kStop);
  EXPECT_EQ(outs.back().stop_token, stop);

  // min_tokens masks the stop token until it is reached: the request cannot stop earlier.
  EngineRequest m = s;
  m.min_tokens = first + 3;
  engine.add_request(2, m);
  outs.clear();
  while (engine.has_work()) for (auto& o : engine.step()) outs.push_back(o);
  ASSERT_GE(std::ssize(outs), m.min_tokens);
  for (int64_t i = 0; i < m.min_tokens - 1; ++i) EXPECT_NE(outs[i].tokens[0].token, stop);

  // The one-prompt generator applies min_tokens the same way: the same tokens.
  Generator alone(model, {.cache = {kvcache::PageDType::kNVFP4, kvcache::PageDType::kFP8}},
                  model.config.max_position_embeddings);
  GenerateRequest g;
  g.ignore_eos = m.ignore_eos;
  g.prompt = m.prompt;
  g.max_tokens = m.max_tokens;
  g.min_tokens = m.min_tokens;
  g.sampling = m.sampling;
  g.stop_token_ids = m.stop_token_ids;
  std::vector<int32_t> engine_tokens;
  for (const RequestOutput& o : outs) engine_tokens.push_back(o.tokens[0].token);
  EXPECT_EQ(alone.generate(g).tokens, engine_tokens);

  // An abort in the middle ends the request and frees its pages at once.
  engine.add_request(3, r);
  engine.step();
  engine.step();
  EXPECT_GT(engine.kv().pool().num_used(), 0);
  const std::optional<RequestOutput> aborted = engine.abort(3);
  ASSERT_TRUE(aborted.has_value());
  EXPECT_EQ(aborted->finish_reason, FinishReason::kAbort);
  EXPECT_EQ(engine.kv().pool().num_used(), 0);
  EXPECT_FALSE(engine.abort(3).has_value());
  EXPECT_FALSE(engine.has_work());
}

TEST(Engine, RequestsThatCanNeverRunAreRefused) {
  auto rng = testing::seeded_rng(3);
  const LoadedModel model = random_model(tiny_m3_config(), rng);
  EngineConfig config = small_pool(2, 64, 4);
  config.max_model_len = 1000;
  LlmEngine engine(model, config);
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 0;
  testing::expect_error([&] { engine.validate(r); }, {"max_tokens must be at least 1"});
  r.max_tokens = 998;
  testing::expect_error([&] { engine.validate(r); }, {"exceeds max_model_len (1000)"});
  r.max_tokens = 300;
  testing::expect_error([&] { engine.validate(r); }, {"needs 3 KV pages; the pool has 2"});
  r.max_tokens = 10;
  r.prompt = {1, 5000};
  testing::expect_error([&] { engine.validate(r); }, {"prompt token 5000 is outside the vocabulary"});
  r.prompt = {};
  testing::expect_error([&] { engine.validate(r); }, {"the prompt has no tokens"});
  r.prompt = {1};
  r.sampling.temperature = -1;
  testing::expect_error([&] { engine.validate(r); }, {"temperature"});
}

TEST(CacheFormats, FlagsNameTheCachesTheIndexQueryAndAttentionOperands) {
  const model::CacheFormats f = cache_formats("nvfp4", "auto", "fp8x2");
  EXPECT_EQ(f.kv, kvcache::PageDType::kNVFP4);
  EXPECT_EQ(f.index, kvcache::PageDType::kNVFP4);
  EXPECT_EQ(f.index_query, IndexQueryFormat::kE4M3x2);
  EXPECT_EQ(cache_formats("bf16", "fp8", "fp8").index_query, IndexQueryFormat::kE4M3);
  EXPECT_EQ(cache_formats("bf16", "fp8").index_query, IndexQueryFormat::kFP32);
  EXPECT_EQ(cache_formats("bf16", "fp8").index, kvcache::PageDType::kFP8);
  testing::expect_error([] { cache_formats("nvfp4", "auto", "int8"); }, {"--index-query-dtype", "int8"});
  EXPECT_EQ(f.attention_operands, AttentionOperands::kFP32);
  EXPECT_EQ(cache_formats("nvfp4", "auto", "fp32", "16bit").attention_operands, AttentionOperands::k16Bit);
  testing::expect_error([] { cache_formats("nvfp4", "auto", "fp32", "fp16"); }, {"--attention-operands", "fp16"});
}

TEST(AsyncEngine, ConcurrentClientsGetTheTokensTheyGetAlone) {
  auto rng = testing::seeded_rng(4);
  const LoadedModel model = random_model(tiny_m3_config(), rng);
  const std::vector<Case> cases = make_cases(model, rng, 10);
  LlmEngine engine(model, small_pool(10, 128, 8));
  AsyncEngine async(engine);
  std::vector<std::vector<int32_t>> got(cases.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < cases.size(); ++i) {
    clients.emplace_back([&, i] {
      const auto stream = std::make_shared<RequestStream>();
      async.submit(cases[i].request, stream);
      for (bool done = false; !done;) {
        for (const RequestOutput& o : stream->wait(std::chrono::milliseconds(1000))) {
          for (const TokenOutput& t : o.tokens) got[i].push_back(t.token);
          done = o.finished();
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(got[i], cases[i].expected) << "request " << i;
  // The engine thread publishes metrics after the step that finished the last request.
  EXPECT_EQ(async.metrics().kv_pages_used, 0);

  // Aborting a long request from the client side ends its stream with kAbort.
  EngineRequest long_request = cases[0].request;
  long_request.max_tokens = 500;
  const auto stream = std::make_shared<RequestStream>();
  const RequestId id = async.submit(long_request, stream);
  stream->wait(std::chrono::milliseconds(1000));
  async.abort(id);
  FinishReason reason = FinishReason::kNone;
  for (int i = 0; i < 100 && reason == FinishReason::kNone; ++i) {
    for (const RequestOutput& o : stream->wait(std::chrono::milliseconds(100))) reason = o.finish_reason;
  }
  EXPECT_EQ(reason, FinishReason::kAbort);
  EXPECT_EQ(async.metrics().kv_pages_used, 0);
}

}  // namespace
}  // namespace fp4::engine
