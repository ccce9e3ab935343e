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

// A run that follows another's choices (its tokens, routing and MSA selections, as kept by
// keep_selections) on the same engine repeats it bit for bit; a choice changed in the followed
// run is taken, and moves exactly the logits after it.
TEST_P(GeneratorTest, FollowingARunTakesItsTokensRoutingAndSelection) {
  auto rng = testing::seeded_rng(16);
  const LoadedModel m = random_model(tiny_m3_config(), rng);
  const int64_t vocab = m.config.vocab_size, k = m.config.num_experts_per_tok;
  GenerateRequest r = greedy(random_prompt(900, vocab, rng), 4);
  r.keep_selections = true;
  // Prefill chunks of 512 and 388 tokens, so the prompt's choices are followed chunk by chunk.
  const GenerateResult lead = Generator(m, options(512), 1000).generate(r);
  ASSERT_EQ(lead.prompt_selections.size(), m.weights.layers.size());
  const int64_t heads = m.config.num_kv_heads, topk = m.config.sparse_topk_blocks;
  for (size_t l = 0; l < lead.prompt_selections.size(); ++l) {
    const int64_t want = m.weights.layers[l].sparse ? heads * 900 * topk : 0;
    ASSERT_EQ(static_cast<int64_t>(lead.prompt_selections[l].size()), want) << "layer " << l;
    for (int64_t h = 0; want > 0 && h < heads; ++h) {  // the last prompt token's is prompt_selection's
      const auto last = lead.prompt_selections[l].begin() + (h * 900 + 899) * topk;
      EXPECT_TRUE(std::equal(last, last + topk, lead.prompt_selection[l].begin() + h * topk)) << "layer " << l;
    }
  }

  GenerateRequest f = r;
  f.follow = &lead;
  f.sampling.temperature = 1.0f;  // the followed tokens, not sampled ones
  const GenerateResult same = Generator(m, options(512), 1000).generate(f);
  EXPECT_EQ(same.tokens, lead.tokens);
  EXPECT_EQ(same.step_logits, lead.step_logits);
  EXPECT_EQ(same.logprobs, lead.logprobs);
  EXPECT_EQ(same.prompt_routes, lead.prompt_routes);
  EXPECT_EQ(same.prompt_selections, lead.prompt_selections);
  EXPECT_EQ(same.step_routes, lead.step_routes);
  EXPECT_EQ(same.step_selections, lead.step_selections);

  // Another expert for the prompt's last token in the first MoE layer: taken, and every step's
  // logits move.
  size_t moe = 0, msa = 0;
  while (!m.weights.layers[moe].moe) ++moe;
  while (!m.weights.layers[msa].sparse) ++msa;
  GenerateResult rerouted = lead;
  std::vector<int32_t>& routes = rerouted.prompt_routes[moe];
  const auto last = routes.end() - k;
  int32_t other = 0;
  while (std::find(last, routes.end(), other) != routes.end()) ++other;
  *last = other;
  std::sort(last, routes.end());
  f.follow = &rerouted;
  const GenerateResult moved = Generator(m, options(512), 1000).generate(f);
  EXPECT_EQ(moved.prompt_routes, rerouted.prompt_routes);
  EXPECT_EQ(moved.tokens, lead.tokens);
  ASSERT_EQ(moved.step_logits.size(), lead.step_logits.size());
  EXPECT_FALSE(std::equal(moved.step_logits.begin(), moved.step_logits.begin() + vocab, lead.step_logits.begin()));

  // One block fewer for the first decode step (entry 1: the step that feeds tokens[0]) in the
  // first MSA layer: taken; the first step's logits stay, the second's move.
  GenerateResult reselected = lead;
  reselected.step_selections[1][msa][0] = -1;
  f.follow = &reselected;
  const GenerateResult narrowed = Generator(m, options(512), 1000).generate(f);
  EXPECT_EQ(narrowed.step_selections, reselected.step_selections);
  EXPECT_TRUE(std::equal(narrowed.step_logits.begin(), narrowed.step_logits.begin() + vocab, lead.step_logits.begin()));
  EXPECT_FALSE(std::equal(narrowed.step_logits.begin() + vocab, narrowed.step_logits.begin() + 2 * vocab,
                          lead.step_logits.begin() + vocab));

  // A run that kept no choices cannot be followed; a prompt of another length cannot follow.
  GenerateRequest plain = r;
  plain.keep_selections = false;
  const GenerateResult unkept = Generator(m, options(512), 1000).generate(plain);
  Generator g(m, options(512), 1000);
  f.follow = &unkept;
  testing::expect_error([&] { g.generate(f); }, {"keep_selections"});
  f.follow = &lead;
  f.prompt.pop_back();
  testing::expect_error([&] { g.generate(f); }, {"899 prompt tokens"});
  EXPECT_EQ(g.pages().pool().num_free(), g.pages().pool().num_pages());
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
