// The forward pass and the generator on a small random model of the M3 family (dense and MSA
// attention, dense MLP and MoE layers), built in memory. The CPU forward computes each token's
// row independently of the others and in a fixed order, so splitting the same tokens into
// different steps (one-shot prefill, chunks, token by token, a cached prefix) must give
// bitwise identical logits: these tests demand exact equality, not a tolerance.
#include <gtest/gtest.h>

#include <random>

#include "engine/generator.h"
#include "tests/support/expect_error.h"
#include "tests/support/random_model.h"

namespace fp4::engine {
namespace {

using testing::random_model;
using testing::random_prompt;
using testing::tiny_m3_config;

GenerateRequest greedy(std::vector<int32_t> prompt, int64_t steps) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = steps;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.keep_logits = true;
  return r;
}

class GeneratorTest : public ::testing::TestWithParam<kvcache::PageDType> {
 protected:
  GeneratorOptions options(int64_t chunk) const {
    GeneratorOptions o;
    o.cache = {GetParam(), GetParam()};
    o.prefill_chunk = chunk;
    return o;
  }
};

TEST_P(GeneratorTest, ChunkingThePrefillChangesNoBit) {
  auto rng = testing::seeded_rng(11);
  const LoadedModel m = random_model(tiny_m3_config(), rng);
  // 700 tokens: 6 blocks, more than the top-4, so MSA layers really select.
  const GenerateRequest r = greedy(random_prompt(700, m.config.vocab_size, rng), 6);
  GenerateResult reference;
  for (int64_t chunk : {700, 129, 1}) {
    Generator g(m, options(chunk), 706);
    const GenerateResult got = g.generate(r);
    ASSERT_EQ(got.tokens.size(), 6u);
    if (chunk == 700) {
      reference = got;
      continue;
    }
    EXPECT_EQ(got.tokens, reference.tokens) << "chunk " << chunk;
    EXPECT_EQ(got.step_logits, reference.step_logits) << "chunk " << chunk;
  }
}

TEST_P(GeneratorTest, SelectionIsSparseBeyondTopkBlocks) {
  auto rng = testing::seeded_rng(12);
  const LoadedModel m = random_model(tiny_m3_config(), rng);
  Generator g(m, options(2048), 1000);
  const GenerateResult r = g.generate(greedy(random_prompt(900, m.config.vocab_size, rng), 1));
  // The last prefill step ran 900 tokens; the final one sees 8 blocks and may keep 4.
  const std::vector<int32_t> sel = g.runner().last_selection()[1];
  const int64_t tokens = 900, topk = 4;
  ASSERT_EQ(r.prompt_selection.size(), g.runner().last_selection().size());
  for (int64_t head = 0; head < 2; ++head) {
    const int32_t* last = &sel[(head * tokens + tokens - 1) * topk];
    EXPECT_EQ(last[topk - 1], 899 / 128) << "the local block is always selected";
    for (int64_t i = 1; i < topk; ++i) EXPECT_LT(last[i - 1], last[i]) << "ascending ids";
    // The result reports the same row: the prompt's last token, head by head.
    const std::vector<int32_t> row(last, last + topk);
    EXPECT_EQ(std::vector<int32_t>(r.prompt_selection[1].begin() + head * topk,
                                   r.prompt_selection[1].begin() + (head + 1) * topk), row);
  }
}

TEST_P(GeneratorTest, CachedPrefixGivesTheSameTokensAndReturnsEveryPage) {
  auto rng = testing::seeded_rng(13);
  const LoadedModel m = random_model(tiny_m3_config(), rng);
  Generator g(m, options(2048), 2 * 400);
  const GenerateRequest r = greedy(random_prompt(390, m.config.vocab_size, rng), 5);
  const GenerateResult first = g.generate(r);
  const GenerateResult second = g.generate(r);
  EXPECT_EQ(first.cached_prompt_tokens, 0);
  EXPECT_EQ(second.cached_prompt_tokens, 384) << "three full pages of the prompt are reused";
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(second.step_logits, first.step_logits);
  EXPECT_EQ(g.pages().pool().num_free(), g.pages().pool().num_pages());
  EXPECT_EQ(g.pages().num_sequences(), 0u);
}

TEST_P(GeneratorTest, BadRequestsAreRefusedAndLeakNoPage) {
  auto rng = testing::seeded_rng(14);
  const LoadedModel m = random_model(tiny_m3_config(), rng);
  Generator g(m, options(2048), 256);
  testing::expect_error([&] { g.generate(greedy({1, 2, 97}, 2)); }, {"97", "vocabulary"});
  testing::expect_error([&] { g.generate(greedy({}, 2)); }, {"prompt"});
  testing::expect_error([&] { g.generate(greedy(random_prompt(300, 97, rng), 2)); },
                        {"cannot hold", "300"});
  auto r = greedy({5, 6}, 4);
  r.sampling.temperature = -1;
  testing::expect_error([&] { g.generate(r); }, {"temperature"});
  EXPECT_EQ(g.pages().pool().num_free(), g.pages().pool().num_pages());
  EXPECT_EQ(g.generate(greedy({5, 6}, 4)).tokens.size(), 4u) << "still usable afterwards";
}

INSTANTIATE_TEST_SUITE_P(EveryPageFormat, GeneratorTest,
                         ::testing::Values(kvcache::PageDType::kFP32, kvcache::PageDType::kBF16,
                                           kvcache::PageDType::kFP8, kvcache::PageDType::kNVFP4),
                         [](const auto& info) { return std::string(kvcache::page_dtype_name(info.param)); });

}  // namespace
}  // namespace fp4::engine
