// ProfilingBackend around the CPU backend: a generation through it gives the same tokens and
// logits as without it, and every op the forward pass issues is counted: per step, each
// layer's projections (those of one input as one call), norms and attention ops, and the LM head.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/profiling_backend.h"
#include "engine/generator.h"
#include "tests/support/random_model.h"

namespace fp4::engine {
namespace {

TEST(ProfilingBackend, CountsEveryOpAndChangesNoBit) {
  auto rng = testing::seeded_rng(51);
  const LoadedModel plain = testing::random_model(testing::tiny_m3_config(), rng);
  auto wrapped = std::make_unique<ProfilingBackend>(std::make_unique<cpu::CpuBackend>());
  const ProfilingBackend* profile = wrapped.get();
  const LoadedModel profiled = testing::same_model_on(plain, std::move(wrapped));

  GenerateRequest r;
  r.prompt = testing::random_prompt(100, plain.config.vocab_size, rng);
  r.max_tokens = 5;
  r.sampling.temperature = 0;
  r.keep_logits = true;
  const GeneratorOptions options{.cache = {kvcache::PageDType::kNVFP4, kvcache::PageDType::kFP8},
                                 .num_pages = 0, .prefill_chunk = 64};
  Generator a(plain, options, 256), b(profiled, options, 256);
  const GenerateResult want = a.generate(r), got = b.generate(r);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.step_logits, want.step_logits);

  // Steps: two prefill chunks (64 + 36 tokens) and 4 decode steps.
  const int64_t steps = 2 + 4, layers = plain.config.num_layers;
  const std::vector<ProfilingBackend::OpTime> ops = profile->totals();
  auto calls = [&](const char* op) {
    const auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& t) { return t.op == op; });
    return it == ops.end() ? int64_t{0} : it->calls;
  };
  // Per layer: input and post-attention norms; then the final norm.
  EXPECT_EQ(calls("add_rms_norm"), steps * (2 * layers + 1));
  EXPECT_EQ(calls("pre_attention"), steps * layers);
  EXPECT_EQ(calls("paged_attention"), steps * layers);
  EXPECT_EQ(calls("indexer_topk"), steps * plain.config.count_sparse_layers());
  EXPECT_EQ(calls("router"), steps * plain.config.count_moe_layers());
  EXPECT_GE(calls("linears"), steps * layers) << "each layer's projections of its input, in one call";
  EXPECT_GE(calls("linear"), steps * layers) << "o at least";
  for (const auto& t : ops) {
    EXPECT_GE(t.ms, 0.0) << t.op;
    EXPECT_GT(t.calls, 0) << t.op;
  }
}

}  // namespace
}  // namespace fp4::engine
