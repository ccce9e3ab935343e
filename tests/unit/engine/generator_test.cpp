// The forward pass and the generator on a small random model of the M3 family (dense and MSA
// attention, dense MLP and MoE layers), built in memory. The CPU forward computes each token's
// row independently of the others and in a fixed order, so splitting the same tokens into
// different steps (one-shot prefill, chunks, token by token, a cached prefix) must give
// bitwise identical logits: these tests demand exact equality, not a tolerance.
#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "tests/support/expect_error.h"
#include "tests/support/random.h"

namespace fp4::engine {
namespace {

model::ModelConfig tiny_m3_config() {
  model::ModelConfig c;
  c.source = "tiny-m3";
  c.hidden_size = 64;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 97;
  c.qk_norm = true;
  c.gemma_norm = true;
  c.rope_theta = 5e6;
  c.rotary_dim = 8;
  c.activation = model::ModelConfig::Activation::kSwigluOai;
  c.moe_layer = {false, true, true};
  c.dense_intermediate_size = 96;
  c.moe_intermediate_size = 32;
  c.shared_intermediate_size = 32;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.routing_bias = true;
  c.routed_scaling_factor = 2.0f;
  c.sparse_layer = {false, true, true};
  c.index_head_dim = 16;
  c.num_index_heads = 2;
  c.sparse_block_size = 128;
  c.sparse_topk_blocks = 4;  // so that 4 x 128 = 512 tokens already drop blocks
  c.sparse_local_blocks = 1;
  c.max_position_embeddings = 8192;
  return c;
}

model::LinearWeight random_linear(int64_t out, int64_t in, std::mt19937_64& rng) {
  model::LinearWeight l;
  l.out = out;
  l.in = in;
  l.w = testing::random_floats(out * in, testing::Distribution::kGaussian, rng);
  for (float& x : l.w) x /= std::sqrt(static_cast<float>(in));
  return l;
}

std::vector<float> random_norm(int64_t n, std::mt19937_64& rng) {
  auto v = testing::random_floats(n, testing::Distribution::kGaussian, rng);
  for (float& x : v) x *= 0.1f;
  return v;
}

model::MlpWeights random_mlp(int64_t hidden, int64_t inter, std::mt19937_64& rng) {
  return {random_linear(inter, hidden, rng), random_linear(inter, hidden, rng),
          random_linear(hidden, inter, rng)};
}

LoadedModel random_model(const model::ModelConfig& c, std::mt19937_64& rng) {
  LoadedModel m;
  m.config = c;
  const int64_t h = c.hidden_size, d = c.head_dim;
  m.weights.embed = random_linear(c.vocab_size, h, rng);
  for (auto& x : m.weights.embed.w) x *= std::sqrt(static_cast<float>(h));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    model::LayerWeights l;
    l.sparse = c.sparse_layer[i];
    l.moe = c.moe_layer[i];
    l.input_norm = random_norm(h, rng);
    l.post_attention_norm = random_norm(h, rng);
    l.attn.q = random_linear(c.num_heads * d, h, rng);
    l.attn.k = random_linear(c.num_kv_heads * d, h, rng);
    l.attn.v = random_linear(c.num_kv_heads * d, h, rng);
    l.attn.o = random_linear(h, c.num_heads * d, rng);
    l.attn.q_norm = random_norm(d, rng);
    l.attn.k_norm = random_norm(d, rng);
    if (l.sparse) {
      l.attn.index_q = random_linear(c.num_index_heads * c.index_head_dim, h, rng);
      l.attn.index_k = random_linear(c.index_head_dim, h, rng);
      l.attn.index_q_norm = random_norm(c.index_head_dim, rng);
      l.attn.index_k_norm = random_norm(c.index_head_dim, rng);
    }
    if (l.moe) {
      l.moe_weights.router = random_linear(c.num_experts, h, rng);
      l.moe_weights.bias = random_norm(c.num_experts, rng);
      for (int64_t e = 0; e < c.num_experts; ++e) {
        l.moe_weights.experts.push_back(random_mlp(h, c.moe_intermediate_size, rng));
      }
      l.moe_weights.has_shared = true;
      l.moe_weights.shared = random_mlp(h, c.shared_intermediate_size, rng);
    } else {
      l.mlp = random_mlp(h, c.dense_intermediate_size, rng);
    }
    m.weights.layers.push_back(std::move(l));
  }
  m.weights.final_norm = random_norm(h, rng);
  m.weights.lm_head = random_linear(c.vocab_size, h, rng);
  m.backend = std::make_unique<cpu::CpuBackend>();
  return m;
}

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> p(n);
  for (auto& t : p) t = d(rng);
  return p;
}

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
  g.generate(greedy(random_prompt(900, m.config.vocab_size, rng), 1));
  // The last prefill step ran 900 tokens; the final one sees 8 blocks and may keep 4.
  const auto& sel = g.runner().last_selection()[1];
  const int64_t tokens = 900, topk = 4;
  for (int64_t head = 0; head < 2; ++head) {
    const int32_t* last = &sel[(head * tokens + tokens - 1) * topk];
    EXPECT_EQ(last[topk - 1], 899 / 128) << "the local block is always selected";
    for (int64_t i = 1; i < topk; ++i) EXPECT_LT(last[i - 1], last[i]) << "ascending ids";
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
