// The forward pass and the generator on a small random model of the M3 family (dense and MSA
// attention, dense MLP and MoE layers), built in memory. The CPU forward computes each token's
// row independently of the others and in a fixed order, so splitting the same tokens into
// different steps (one-shot prefill, chunks, token by token, a cached prefix) must give
// bitwise identical logits: these tests demand exact equality, not a tolerance.
#include <gtest/gtest.h>

#include <algorithm>
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

// keep_selections reports the selection behind every step's logits: the prompt's last token's,
// then each decode step's, whose own block is always among them; and it changes no bit.
TEST_P(GeneratorTest, StepSelectionsFollowEachStepAndChangeNothing) {
  auto rng = testing::seeded_rng(14);
  const LoadedModel m = random_model(tiny_m3_config(), rng);
  GenerateRequest r = greedy(random_prompt(900, m.config.vocab_size, rng), 4);
  Generator plain_gen(m, options(2048), 1000);
  const GenerateResult plain = plain_gen.generate(r);
  r.keep_selections = true;
  Generator kept_gen(m, options(2048), 1000);
  const GenerateResult kept = kept_gen.generate(r);
  EXPECT_EQ(kept.tokens, plain.tokens);
  EXPECT_EQ(kept.step_logits, plain.step_logits);
  EXPECT_TRUE(plain.step_selections.empty());
  ASSERT_EQ(kept.step_selections.size(), kept.tokens.size());
  EXPECT_EQ(kept.step_selections[0], kept.prompt_selection);
  const int64_t heads = m.config.num_kv_heads, topk = m.config.sparse_topk_blocks;
  for (size_t i = 1; i < kept.step_selections.size(); ++i) {
    const int32_t own_block = static_cast<int32_t>((900 + i - 1) / 128);  // the decoded token's
    ASSERT_EQ(kept.step_selections[i].size(), kept.prompt_selection.size());
    for (size_t layer = 0; layer < kept.step_selections[i].size(); ++layer) {
      const std::vector<int32_t>& ids = kept.step_selections[i][layer];
      if (kept.prompt_selection[layer].empty()) {
        EXPECT_TRUE(ids.empty()) << "a dense layer selects nothing";
        continue;
      }
      ASSERT_EQ(static_cast<int64_t>(ids.size()), heads * topk);
      for (int64_t h = 0; h < heads; ++h) {
        EXPECT_EQ(ids[h * topk + topk - 1], own_block) << "step " << i << ", layer " << layer << ", head " << h;
      }
    }
  }
  // The routing: every prompt token's and every step's top_k distinct experts, ascending; the
  // first step's are the prompt's last token's.
  const int64_t k = m.config.num_experts_per_tok, experts = m.config.num_experts;
  EXPECT_TRUE(plain.prompt_routes.empty() && plain.step_routes.empty());
  ASSERT_EQ(kept.prompt_routes.size(), m.weights.layers.size());
  ASSERT_EQ(kept.step_routes.size(), kept.tokens.size());
  int64_t moe_layers = 0;
  for (size_t layer = 0; layer < m.weights.layers.size(); ++layer) {
    const bool moe = m.weights.layers[layer].moe;
    moe_layers += moe;
    const std::vector<int32_t>& prompt = kept.prompt_routes[layer];
    ASSERT_EQ(static_cast<int64_t>(prompt.size()), moe ? 900 * k : 0) << "layer " << layer;
    for (size_t i = 0; i < kept.step_routes.size(); ++i) {
      const std::vector<int32_t>& ids = kept.step_routes[i].at(layer);
      ASSERT_EQ(static_cast<int64_t>(ids.size()), moe ? k : 0) << "step " << i << ", layer " << layer;
      for (int64_t j = 0; j < static_cast<int64_t>(ids.size()); ++j) {
        EXPECT_TRUE(ids[j] >= 0 && ids[j] < experts && (j == 0 || ids[j - 1] < ids[j]))
            << "step " << i << ", layer " << layer << ": expert " << ids[j];
      }
      if (i == 0) {
        EXPECT_TRUE(std::equal(ids.begin(), ids.end(), prompt.end() - static_cast<int64_t>(ids.size())));
      }
    }
  }
  EXPECT_GT(moe_layers, 0) << "the model has no routing to report";
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
