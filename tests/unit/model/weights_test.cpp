#include "model/weights.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"
#include "model/presets.h"

namespace fp4::model {
namespace {

ModelConfig preset(const char* name) {
  return parse_model_config(std::string(find_model_preset(name)->config_json), name);
}

double relative_gap(double computed, double published) {
  return (computed - published) / published;
}

TEST(WeightTensorBytes, FollowsTheBlockFormats) {
  // [3072, 6144]: MXFP8 = 1 B/value + one UE8M0 per 32; NVFP4 = 0.5 B/value + one E4M3 per 16,
  // plus the two FP32 per-tensor scales (weight_scale_2, input_scale).
  const int64_t n = int64_t{3072} * 6144;
  EXPECT_EQ(weight_tensor_bytes(WeightFormat::kBF16, 3072, 6144), 2 * n);
  EXPECT_EQ(weight_tensor_bytes(WeightFormat::kFP32, 3072, 6144), 4 * n);
  EXPECT_EQ(weight_tensor_bytes(WeightFormat::kMXFP8, 3072, 6144), n + n / 32);
  EXPECT_EQ(weight_tensor_bytes(WeightFormat::kNVFP4, 3072, 6144), n / 2 + n / 16 + 8);
  // A partial block is padded: 33 columns take two MXFP8 scales and three NVFP4 blocks.
  EXPECT_EQ(weight_tensor_bytes(WeightFormat::kMXFP8, 1, 33), 33 + 2);
  EXPECT_EQ(weight_tensor_bytes(WeightFormat::kNVFP4, 1, 33), 24 + 3 + 8);
  EXPECT_THROW(weight_tensor_bytes(WeightFormat::kBF16, 0, 5), Error);
}

TEST(CountWeights, M3ParameterCounts) {
  const WeightBreakdown w = count_weights(preset("minimax-m3"), QuantScheme::kBF16);
  // The routed experts hold 3 x 6144 x 3072 x 128 x 57 parameters.
  EXPECT_EQ(w.params_of(WeightClass::kRoutedExperts), int64_t{3} * 6144 * 3072 * 128 * 57);
  EXPECT_EQ(w.params_of(WeightClass::kEmbedding), int64_t{200064} * 6144);
  EXPECT_EQ(w.params_of(WeightClass::kLmHead), int64_t{200064} * 6144);
  // 427B total per the vLLM recipe page (428B elsewhere); the text backbone counts 426.2B, the
  // vision tower (not in text_config) makes up most of the rest.
  EXPECT_NEAR(static_cast<double>(w.total_params()), 427e9, 0.01 * 427e9);
}

TEST(CountWeights, CheckpointSizesMatchThePublishedOnes) {
  // The published sizes come from the presets (presets/*/checkpoint.json), exactly as
  // published: M3-MXFP8 451.5 GB, M3.1-Flash 250,116,419,880 B in 48 shards.
  const ModelPreset& m3 = *find_model_preset("minimax-m3");
  const ModelPreset& m31 = *find_model_preset("minimax-m3.1-flash");
  EXPECT_EQ(m3.checkpoint.total_bytes, 451'500'000'000);
  EXPECT_EQ(m31.checkpoint.total_bytes, 250'116'419'880);
  EXPECT_EQ(m31.checkpoint.shards, 48);
  //
  // M3 (mxfp8): we count 445.79 GB, 1.3% under 451.5 GB. The 451.5 GB figure is unconfirmed; a
  // third-party card gives about 444 GB, within 0.4% of ours. What we leave out is the vision
  // tower (about 0.6B parameters, 1.3 GB in BF16) and the MTP module the checkpoint may carry
  // (num_nextn_predict_layers = 1: one MoE layer in MXFP8 would add about 7.9 GB); either
  // closes the gap, and neither is loaded when serving text without speculative decoding.
  //
  // M3.1 (nvfp4-experts): we count 252.15 GB, 0.8% over the shard total. The official
  // checkpoint's exact per-tensor formats are unconfirmed; keeping the shared experts in MXFP8
  // rather than BF16, for instance, would remove 3.1 GB and bring us 0.4% under.
  const double computed_m3 = static_cast<double>(count_weights(preset("minimax-m3"),
                                                               m3.scheme).total_bytes());
  const double computed_m31 = static_cast<double>(count_weights(preset("minimax-m3.1-flash"),
                                                                m31.scheme).total_bytes());
  const double published_m3 = static_cast<double>(m3.checkpoint.total_bytes);
  const double published_m31 = static_cast<double>(m31.checkpoint.total_bytes);
  EXPECT_LT(std::abs(relative_gap(computed_m3, published_m3)), 0.02) << computed_m3;
  EXPECT_LT(std::abs(relative_gap(computed_m31, published_m31)), 0.02) << computed_m31;
  // "44.6% smaller": published 1 - 250.12/451.5 = 44.60%; computed 1 - 252.15/445.79 = 43.44%.
  EXPECT_NEAR(1.0 - published_m31 / published_m3, 0.446, 0.0005);
  EXPECT_NEAR(1.0 - computed_m31 / computed_m3, 0.4344, 0.0005);
  EXPECT_NEAR(1.0 - computed_m31 / computed_m3, 0.446, 0.02);
}

TEST(CountWeights, SchemesDifferOnlyWhereTheySay) {
  const ModelConfig c = preset("minimax-m3.1-flash");
  const WeightBreakdown mx = count_weights(c, QuantScheme::kMXFP8);
  const WeightBreakdown nv = count_weights(c, QuantScheme::kNVFP4Experts);
  const WeightBreakdown bf = count_weights(c, QuantScheme::kBF16);
  for (WeightClass cls : {WeightClass::kEmbedding, WeightClass::kAttention, WeightClass::kIndex,
                          WeightClass::kSharedExpert, WeightClass::kDenseMlp,
                          WeightClass::kLmHead, WeightClass::kRouter}) {
    EXPECT_EQ(mx.bytes_of(cls), nv.bytes_of(cls)) << weight_class_name(cls);
  }
  const int64_t routed = bf.params_of(WeightClass::kRoutedExperts);
  EXPECT_EQ(bf.bytes_of(WeightClass::kRoutedExperts), 2 * routed);
  EXPECT_EQ(mx.bytes_of(WeightClass::kRoutedExperts), routed + routed / 32);
  // 57 layers x 128 experts x 3 projections carry two FP32 scales each.
  EXPECT_EQ(nv.bytes_of(WeightClass::kRoutedExperts), routed / 2 + routed / 16 + 57 * 128 * 3 * 8);
  EXPECT_EQ(bf.bytes_of(WeightClass::kRouter), 57 * (128 * 6144 + 128) * 4);  // gate + bias, FP32
}

TEST(WeightsPerGpu, DepReplicatesEverythingButTheExperts) {
  const WeightBreakdown w =
      count_weights(preset("minimax-m3.1-flash"), QuantScheme::kNVFP4Experts);
  const int64_t experts = w.bytes_of(WeightClass::kRoutedExperts);
  const int64_t rest = w.total_bytes() - experts;
  // DEP4: tp = 1 inside each rank, 128 experts over 4 GPUs = 32 each.
  EXPECT_EQ(weights_bytes_per_gpu(w, {1, 4}), rest + experts / 4);
  EXPECT_EQ(class_bytes_per_gpu(w, WeightClass::kRoutedExperts, {1, 4}), experts / 4);
  // Uneven: 128 experts over 3 GPUs; the fullest GPU holds 43.
  EXPECT_EQ(class_bytes_per_gpu(w, WeightClass::kRoutedExperts, {1, 3}), experts / 128 * 43);
}

TEST(WeightsPerGpu, TensorParallelSplitsByHead) {
  const ModelConfig c = preset("minimax-m3");
  const WeightBreakdown w = count_weights(c, QuantScheme::kBF16);
  const int64_t h = 6144, L = 60;
  const int64_t q = L * 8192 * h * 2, kv = L * 512 * h * 2;  // q_proj; k_proj (= v_proj)
  // TP8: q and o split 8 ways; the 4 KV heads give each GPU one head (a quarter) of k and v.
  EXPECT_EQ(class_bytes_per_gpu(w, WeightClass::kAttention, {8, 8}), 2 * q / 8 + 2 * kv / 4);
  // The index branch: index_q's 4 heads split like KV heads, the single index-K head stays whole.
  const int64_t iq = 57 * 512 * h * 2, ik = 57 * 128 * h * 2;
  EXPECT_EQ(class_bytes_per_gpu(w, WeightClass::kIndex, {8, 8}), iq / 4 + ik);
  EXPECT_EQ(class_bytes_per_gpu(w, WeightClass::kIndex, {2, 8}), iq / 2 + ik);
  EXPECT_EQ(class_bytes_per_gpu(w, WeightClass::kNorms, {8, 8}), w.bytes_of(WeightClass::kNorms));
}

TEST(DeclaredWeights, KeepsTheComputedExpertsAndSplitsTheRest) {
  const WeightBreakdown computed = count_weights(preset("minimax-m3"), QuantScheme::kMXFP8);
  const int64_t experts = computed.bytes_of(WeightClass::kRoutedExperts);
  const WeightBreakdown d = declared_weights(computed, 451'500'000'000);
  EXPECT_EQ(d.total_bytes(), 451'500'000'000);
  EXPECT_EQ(d.bytes_of(WeightClass::kRoutedExperts), experts);
  EXPECT_EQ(weights_bytes_per_gpu(d, {1, 4}), 451'500'000'000 - experts + experts / 4);
  EXPECT_THROW(declared_weights(computed, experts - 1), Error);
}

TEST(ClassifyTensor, UsesTheCheckpointNames) {
  struct Case {
    const char* name;
    WeightClass cls;
    Sharding sharding;
  };
  const Case cases[] = {
      {"language_model.model.embed_tokens.weight", WeightClass::kEmbedding, Sharding::kTensorParallel},
      {"model.layers.7.self_attn.q_proj.weight", WeightClass::kAttention, Sharding::kTensorParallel},
      {"model.layers.7.self_attn.k_proj.weight_scale_inv", WeightClass::kAttention, Sharding::kHeads},
      {"model.layers.7.self_attn.q_norm.weight", WeightClass::kNorms, Sharding::kReplicated},
      {"model.layers.7.self_attn.index_q_proj.weight", WeightClass::kIndex, Sharding::kHeads},
      {"model.layers.7.self_attn.index_k_proj.weight", WeightClass::kIndex, Sharding::kReplicated},
      {"model.layers.7.self_attn.index_k_norm.weight", WeightClass::kNorms, Sharding::kReplicated},
      {"model.layers.7.block_sparse_moe.gate.weight", WeightClass::kRouter, Sharding::kReplicated},
      {"model.layers.7.block_sparse_moe.e_score_correction_bias", WeightClass::kRouter,
       Sharding::kReplicated},
      {"model.layers.7.block_sparse_moe.experts.12.w2.weight_scale_2", WeightClass::kRoutedExperts,
       Sharding::kExperts},
      {"model.layers.7.block_sparse_moe.shared_experts.up_proj.weight", WeightClass::kSharedExpert,
       Sharding::kTensorParallel},
      {"model.layers.1.mlp.down_proj.weight", WeightClass::kDenseMlp, Sharding::kTensorParallel},
      {"model.mtp.layers.0.self_attn.q_proj.weight", WeightClass::kMtp, Sharding::kNotLoaded},
      {"vision_tower.blocks.0.attn.qkv.weight", WeightClass::kOther, Sharding::kReplicated},
      {"lm_head.weight", WeightClass::kLmHead, Sharding::kTensorParallel},
      {"model.norm.weight", WeightClass::kNorms, Sharding::kReplicated},
  };
  for (const Case& c : cases) {
    const WeightGroup g = classify_tensor(c.name, 4, 4);
    EXPECT_EQ(g.cls, c.cls) << c.name;
    EXPECT_EQ(g.sharding, c.sharding) << c.name;
  }
}

TEST(QuantScheme, ParsesItsNames) {
  for (QuantScheme s : {QuantScheme::kBF16, QuantScheme::kMXFP8, QuantScheme::kNVFP4Experts}) {
    EXPECT_EQ(parse_quant_scheme(quant_scheme_name(s)), s);
  }
  EXPECT_THROW(parse_quant_scheme("nvfp4"), Error);
}

}  // namespace
}  // namespace fp4::model
