#include "model/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "kvcache/sizing.h"
#include "model/presets.h"
#include "tests/support/expect_error.h"

namespace fp4::model {
namespace {

using kvcache::CacheDType;
using testing::expect_error;

ModelConfig preset(const char* name) {
  const ModelPreset* p = find_model_preset(name);
  EXPECT_NE(p, nullptr) << name;
  return parse_model_config(std::string(p->config_json), name);
}

TEST(Presets, ParseIntoTheM3Geometry) {
  const ModelConfig m3 = preset("minimax-m3");
  EXPECT_EQ(m3.architecture, "MiniMaxM3SparseForConditionalGeneration");
  EXPECT_EQ(m3.num_layers, 60);
  EXPECT_EQ(m3.count_sparse_layers(), 57);  // layers 0-2 use dense attention
  EXPECT_EQ(m3.count_moe_layers(), 57);
  EXPECT_EQ(m3.num_kv_heads, 4);
  EXPECT_EQ(m3.head_dim, 128);
  EXPECT_EQ(m3.num_experts, 128);
  EXPECT_EQ(m3.shared_intermediate_size, 3072);
  EXPECT_EQ(m3.dense_intermediate_size, 12288);
  EXPECT_EQ(m3.max_position_embeddings, 1 << 20);
  const ModelConfig m31 = preset("minimax-m3.1-flash");
  EXPECT_EQ(m31.count_sparse_layers(), 60);  // sparse attention in all 60 layers
  EXPECT_EQ(m31.count_moe_layers(), 57);
  EXPECT_EQ(find_model_preset("minimax-m4"), nullptr);
}

TEST(Presets, CarryThePublishedCheckpoints) {
  const ModelPreset* m3 = find_model_preset("minimax-m3");
  const ModelPreset* m31 = find_model_preset("minimax-m3.1-flash");
  ASSERT_TRUE(m3 && m31);
  EXPECT_EQ(m3->checkpoint.repository, "MiniMaxAI/MiniMax-M3-MXFP8");
  EXPECT_EQ(m3->checkpoint.total_as_published, "451.5 GB");
  EXPECT_EQ(m3->checkpoint.shards, 0);  // not published
  EXPECT_EQ(m31->checkpoint.repository, "MiniMaxAI/MiniMax-M3.1-Flash");
  EXPECT_EQ(m31->checkpoint.total_bytes, 250'116'419'880);
}

TEST(Presets, CheckpointFileErrorsNameTheKey) {
  const PublishedCheckpoint c = parse_published_checkpoint(
      R"({"repository": "a/b", "total_bytes": 12, "total_as_published": "12 B"})", "ck.json");
  EXPECT_EQ(c.total_bytes, 12);
  expect_error([] { parse_published_checkpoint(R"({"repository": "a/b"})", "ck.json"); },
               {"ck.json", "total_bytes", "missing"});
  expect_error([] {
    parse_published_checkpoint(
        R"({"repository": "a/b", "total_bytes": 4.5e11, "total_as_published": "x"})", "ck.json");
  }, {"ck.json", "total_bytes", "450000000000", "positive integer"});
  expect_error([] {
    parse_published_checkpoint(R"({"repository": "a/b", "total_bytes": 1, "total_as_published":
        "1 B", "shards": 0})", "ck.json");
  }, {"shards is 0"});
  expect_error([] { parse_published_checkpoint("[1", "ck.json"); }, {"ck.json", "not valid JSON"});
}

struct KvCase {
  const char* preset;
  CacheDType kv;
  CacheDType index;
  int64_t kv_bytes;
  int64_t index_bytes;
};

TEST(Presets, KvBytesPerTokenInEveryFormat) {
  // Main K/V: 60 layers x 4 heads x 2 (K, V) x bytes per 128-dim row (bf16 256, fp8 128, nvfp4
  // 64 + 8). Index K: one 128-dim row per sparse layer (57 in M3, 60 in M3.1). The launch
  // report's 61,440 (M3, FP8) and 34,560 (M3.1, NVFP4) leave the index cache out.
  const KvCase cases[] = {
      {"minimax-m3", CacheDType::kBF16, CacheDType::kBF16, 122'880, 14'592},
      {"minimax-m3", CacheDType::kFP8, CacheDType::kFP8, 61'440, 7'296},
      {"minimax-m3", CacheDType::kNVFP4, CacheDType::kNVFP4, 34'560, 4'104},
      {"minimax-m3.1-flash", CacheDType::kBF16, CacheDType::kBF16, 122'880, 15'360},
      {"minimax-m3.1-flash", CacheDType::kFP8, CacheDType::kFP8, 61'440, 7'680},
      {"minimax-m3.1-flash", CacheDType::kNVFP4, CacheDType::kNVFP4, 34'560, 4'320},
  };
  for (const KvCase& c : cases) {
    const auto layout = kvcache::kv_layout(kv_geometry(preset(c.preset)), {c.kv, c.index});
    EXPECT_EQ(layout.kv_bytes_per_token(), c.kv_bytes) << c.preset << " " << cache_dtype_name(c.kv);
    EXPECT_EQ(layout.index_bytes_per_token(), c.index_bytes)
        << c.preset << " " << cache_dtype_name(c.index);
  }
}

TEST(Presets, M3DenseLayersCarryNoIndexCache) {
  const auto l = kvcache::kv_layout(kv_geometry(preset("minimax-m3")),
                                    {CacheDType::kNVFP4, CacheDType::kBF16});
  EXPECT_EQ(l.dense.layers, 3);
  EXPECT_EQ(l.dense.index, 0);
  EXPECT_EQ(l.sparse.layers, 57);
  EXPECT_EQ(l.sparse.kv, 576);
  EXPECT_EQ(l.sparse.index, 256);
}

nlohmann::json minimal_dense() {
  return {{"hidden_size", 64}, {"num_hidden_layers", 5}, {"num_attention_heads", 8},
          {"num_key_value_heads", 4}, {"vocab_size", 512}, {"intermediate_size", 172},
          {"max_position_embeddings", 1024}};
}

TEST(ParseConfig, ReadsAFlatDenseConfig) {
  const ModelConfig c = parse_model_config(minimal_dense().dump(), "tiny");
  EXPECT_EQ(c.head_dim, 8);  // hidden_size / num_attention_heads when head_dim is absent
  EXPECT_FALSE(c.is_moe());
  EXPECT_EQ(c.count_sparse_layers(), 0);
  EXPECT_EQ(c.dense_intermediate_size, 172);
  const auto g = kv_geometry(c);
  EXPECT_EQ(g.num_dense_layers, 5);
  EXPECT_EQ(g.num_sparse_layers, 0);
}

TEST(ParseConfig, ErrorsNameTheKeyAndTheSource) {
  auto j = minimal_dense();
  j.erase("num_attention_heads");
  expect_error([&] { parse_model_config(j.dump(), "cfg.json"); },
               {"cfg.json", "num_attention_heads", "missing", "positive integer"});

  nlohmann::json nested = {{"text_config", minimal_dense()}};
  nested["text_config"]["vocab_size"] = "many";
  expect_error([&] { parse_model_config(nested.dump(), "vl.json"); },
               {"vl.json", "text_config.vocab_size", "\"many\""});

  nested = {{"text_config", minimal_dense()}};
  nested["text_config"]["num_local_experts"] = 8;
  nested["text_config"]["num_experts_per_tok"] = 2;
  nested["text_config"]["moe_layer_freq"] = {0, 1, 1};
  expect_error([&] { parse_model_config(nested.dump(), "moe.json"); },
               {"text_config.moe_layer_freq", "5 entries", "got 3 entries"});

  nested["text_config"]["moe_layer_freq"] = {0, 1, 1, 1, 2};
  expect_error([&] { parse_model_config(nested.dump(), "moe.json"); },
               {"text_config.moe_layer_freq[4]", "0 or 1"});

  nested["text_config"]["moe_layer_freq"] = {0, 1, 1, 1, 1};
  expect_error([&] { parse_model_config(nested.dump(), "moe.json"); },
               {"text_config.dense_intermediate_size", "missing"});
  nested["text_config"]["dense_intermediate_size"] = 344;
  nested["text_config"]["sparse_attention_config"] = {{"use_sparse_attention", true},
                                                      {"sparse_index_dim", 8}};
  expect_error([&] { parse_model_config(nested.dump(), "moe.json"); },
               {"text_config.sparse_attention_config.sparse_attention_freq", "missing"});

  expect_error([] { parse_model_config("{\"hidden_size\": 64,", "broken.json"); },
               {"broken.json", "not valid JSON"});
  expect_error([] { parse_model_config("[1, 2]", "list.json"); }, {"list.json", "JSON object"});
}

TEST(ParseConfig, SparseBlockMustBeOnePage) {
  nlohmann::json j = nlohmann::json::parse(find_model_preset("minimax-m3")->config_json);
  j["text_config"]["sparse_attention_config"]["sparse_block_size"] = 64;
  const ModelConfig c = parse_model_config(j.dump(), "m3-block64");
  expect_error([&] { kv_geometry(c); }, {"sparse_block_size 64", "128-token KV page"});
}

TEST(LoadConfig, ReadsAFileOrADirectory) {
  const auto dir = std::filesystem::temp_directory_path() / "fp4serve_config_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.json") << minimal_dense().dump();
  }
  EXPECT_EQ(load_model_config(dir.string()).num_layers, 5);
  EXPECT_EQ(load_model_config((dir / "config.json").string()).num_layers, 5);
  expect_error([&] { load_model_config((dir / "absent.json").string()); },
               {"cannot read model config", "absent.json"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp4::model
