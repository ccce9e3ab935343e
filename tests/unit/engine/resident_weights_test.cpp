// ResidentWeights on a backend with memory of its own (a CPU backend that claims so, so the
// test runs anywhere): each tensor copied once, projections whose values are all BF16 held in
// BF16 and those whose blocks are all MXFP8 in MXFP8 (the embedding excepted), device_bytes
// counting what was placed, place_new placing only what is new; and a model whose projections
// are held in BF16 and MXFP8 computing the very bits of the same model on host tensors.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>

#include "engine/generator.h"
#include "formats/minifloat.h"
#include "formats/mxfp8.h"
#include "model/resident_weights.h"
#include "tests/support/random_model.h"

namespace fp4::engine {
namespace {

class OwnMemoryCpuBackend final : public cpu::CpuBackend {
 public:
  bool uses_host_memory() const override { return false; }
};

void round_to_bf16(model::LinearWeight& w) {
  for (float& v : w.w) v = bf16_decode(bf16_encode(v));
}

// Each run of 32 values along a row made an MXFP8 block (w.in a multiple of 32).
void round_to_mxfp8(model::LinearWeight& w) {
  ASSERT_EQ(w.in % kMxfp8BlockElems, 0);
  uint8_t codes[kMxfp8BlockElems];
  for (size_t b = 0; b < w.w.size(); b += kMxfp8BlockElems) {
    const uint8_t scale = mxfp8_quantize_block(w.w.data() + b, codes);
    mxfp8_dequantize_block(codes, scale, w.w.data() + b);
  }
}

TEST(ResidentWeights, CopiesOnceHoldsBf16ValuesInBf16AndPlacesOnlyWhatIsNew) {
  auto rng = testing::seeded_rng(41);
  OwnMemoryCpuBackend backend;
  model::ModelWeights w;
  w.embed = testing::random_linear(50, 16, rng);  // FP32 values: stays FP32
  w.lm_head = testing::random_linear(50, 16, rng);
  round_to_bf16(w.lm_head);                       // BF16 values: held in BF16
  w.final_norm = std::vector<float>(16, 1.0f);
  model::ResidentWeights resident(w, backend);
  const int64_t first = resident.device_bytes();
  EXPECT_EQ(first, 50 * 16 * 4 + 50 * 16 * 2 + 16 * 4);

  const model::ResidentWeights::Linear embed = resident(w.embed), head = resident(w.lm_head);
  ASSERT_NE(embed.w, nullptr);
  EXPECT_EQ(embed.w_bf16, nullptr);
  EXPECT_NE(embed.w, w.embed.w.data()) << "a backend with its own memory reads a copy";
  EXPECT_EQ(std::memcmp(embed.w, w.embed.w.data(), w.embed.w.size() * 4), 0);
  ASSERT_NE(head.w_bf16, nullptr);
  EXPECT_EQ(head.w, nullptr);
  for (size_t i = 0; i < w.lm_head.w.size(); ++i) ASSERT_EQ(bf16_decode(head.w_bf16[i]), w.lm_head.w[i]);
  EXPECT_EQ(resident(model::LinearWeight{}).w, nullptr);

  // MXFP8 values: a projection is held in MXFP8 (33 bytes a block), the embedding in BF16.
  model::ModelWeights mx;
  mx.embed = testing::random_linear(40, 64, rng);
  mx.lm_head = testing::random_linear(40, 64, rng);
  round_to_mxfp8(mx.embed);
  round_to_mxfp8(mx.lm_head);
  model::ResidentWeights held(mx, backend);
  EXPECT_EQ(held.device_bytes(), 40 * 64 * 2 + 40 * 64 + 40 * 2);
  ASSERT_NE(held(mx.embed).w_bf16, nullptr);
  const model::ResidentWeights::Linear mx_head = held(mx.lm_head);
  ASSERT_NE(mx_head.w_e4m3, nullptr);
  ASSERT_NE(mx_head.w_scales, nullptr);
  EXPECT_EQ(mx_head.w, nullptr);
  EXPECT_EQ(mx_head.w_bf16, nullptr);
  std::vector<float> decoded(mx.lm_head.w.size());
  for (size_t b = 0; b < decoded.size() / kMxfp8BlockElems; ++b) {
    mxfp8_dequantize_block(mx_head.w_e4m3 + b * kMxfp8BlockElems, mx_head.w_scales[b],
                           decoded.data() + b * kMxfp8BlockElems);
  }
  EXPECT_EQ(std::memcmp(decoded.data(), mx.lm_head.w.data(), decoded.size() * 4), 0);

  resident.place_new(w, backend);
  EXPECT_EQ(resident.device_bytes(), first) << "nothing new, nothing placed";
  w.layers.emplace_back();
  w.layers.back().input_norm = std::vector<float>(16, 2.0f);
  resident.place_new(w, backend);
  EXPECT_EQ(resident.device_bytes(), first + 16 * 4);
  EXPECT_NE(resident(w.layers.back().input_norm), nullptr);
}

TEST(ResidentWeights, ProjectionsHeldInBf16AndMxfp8GiveTheHostTensorsBits) {
  auto rng = testing::seeded_rng(42);
  LoadedModel host = testing::random_model(testing::tiny_m3_config(), rng);
  auto round_all = [](model::ModelWeights& w) {
    auto mlp = [](model::MlpWeights& m) {
      for (model::LinearWeight* p : {&m.gate, &m.up, &m.down}) round_to_bf16(*p);
    };
    round_to_bf16(w.embed);
    round_to_bf16(w.lm_head);
    for (model::LayerWeights& l : w.layers) {
      // Attention and the index branch as an MXFP8 checkpoint stores them.
      for (model::LinearWeight* p : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.attn.index_q, &l.attn.index_k}) {
        if (!p->w.empty()) round_to_mxfp8(*p);
      }
      round_to_bf16(l.moe_weights.router);
      mlp(l.mlp);
      mlp(l.moe_weights.shared);
      for (model::MlpWeights& e : l.moe_weights.experts) mlp(e);
    }
  };
  round_all(host.weights);
  host.resident = std::make_unique<model::ResidentWeights>(host.weights, *host.backend);
  const LoadedModel own = testing::same_model_on(host, std::make_unique<OwnMemoryCpuBackend>());
  ASSERT_NE(own.resident->device_bytes(), 0);
  ASSERT_NE((*own.resident)(own.weights.layers[0].attn.q).w_e4m3, nullptr);
  ASSERT_NE((*own.resident)(own.weights.layers[0].attn.o).w_e4m3, nullptr);
  ASSERT_NE((*own.resident)(own.weights.lm_head).w_bf16, nullptr);

  GenerateRequest r;
  r.prompt = testing::random_prompt(200, host.config.vocab_size, rng);
  r.max_tokens = 8;
  r.sampling.temperature = 0;
  r.keep_logits = true;
  const GeneratorOptions options{.cache = {kvcache::PageDType::kBF16, kvcache::PageDType::kBF16}};
  Generator a(host, options, 512), b(own, options, 512);
  const GenerateResult want = a.generate(r), got = b.generate(r);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.step_logits, want.step_logits) << "the BF16- or MXFP8-held projections changed a bit";
}

}  // namespace
}  // namespace fp4::engine
