#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "model/json_object.h"

namespace fp4::model {
namespace {

using nlohmann::json;

// Reads typed values out of one JSON object and names the key's full path when one is wrong.
class Fields {
 public:
  Fields(const json& object, std::string prefix, const std::string& source)
      : object_(object), prefix_(std::move(prefix)), source_(source) {}

  std::string path(const std::string& key) const { return prefix_ + key; }
  const json* find(const std::string& key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  int64_t positive(const std::string& key) const {
    const json* v = find(key);
    FP4_CHECK(v != nullptr, "{}: {} is missing (expected a positive integer)", source_, path(key));
    return checked_positive(*v, key);
  }
  int64_t non_negative_or(const std::string& key, int64_t fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    FP4_CHECK(v->is_number_integer() && v->get<int64_t>() >= 0,
              "{}: {} is {}, expected a non-negative integer", source_, path(key), v->dump());
    return v->get<int64_t>();
  }
  double number_or(const std::string& key, double fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    FP4_CHECK(v->is_number() && std::isfinite(v->get<double>()), "{}: {} is {}, expected a number",
              source_, path(key), v->dump());
    return v->get<double>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    FP4_CHECK(v->is_string(), "{}: {} is {}, expected a string", source_, path(key), v->dump());
    return v->get<std::string>();
  }
  // A token id or a list of them (eos_token_id is either in Hugging Face configs).
  std::vector<int64_t> ids_or_empty(const std::string& key) const {
    const json* v = find(key);
    if (v == nullptr) return {};
    std::vector<int64_t> ids;
    for (const json& e : v->is_array() ? *v : json::array({*v})) {
      FP4_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0,
                "{}: {} holds {}, expected token ids", source_, path(key), e.dump());
      ids.push_back(e.get<int64_t>());
    }
    return ids;
  }
  int64_t positive_or(const std::string& key, int64_t fallback) const {
    const json* v = find(key);
    return v == nullptr ? fallback : checked_positive(*v, key);
  }
  bool flag_or(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    FP4_CHECK(v->is_boolean(), "{}: {} is {}, expected true or false", source_, path(key),
              v->dump());
    return v->get<bool>();
  }
  // A per-layer list of 0/1 (or booleans) with exactly `layers` entries.
  std::vector<bool> layer_flags(const std::string& key, int64_t layers) const {
    const json* v = find(key);
    FP4_CHECK(v != nullptr, "{}: {} is missing (expected a list of {} entries of 0 or 1)",
              source_, path(key), layers);
    FP4_CHECK(v->is_array() && static_cast<int64_t>(v->size()) == layers,
              "{}: {} must be a list of num_hidden_layers = {} entries of 0 or 1, got {}",
              source_, path(key), layers,
              v->is_array() ? std::to_string(v->size()) + " entries" : v->dump());
    std::vector<bool> flags;
    for (size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      const bool ok = e.is_boolean() || (e.is_number_integer() && (e == 0 || e == 1));
      FP4_CHECK(ok, "{}: {}[{}] is {}, expected 0 or 1", source_, path(key), i, e.dump());
      flags.push_back(e.is_boolean() ? e.get<bool>() : e.get<int>() == 1);
    }
    return flags;
  }

 private:
  int64_t checked_positive(const json& v, const std::string& key) const {
    FP4_CHECK(v.is_number_integer() && v.get<int64_t>() > 0,
              "{}: {} is {}, expected a positive integer", source_, path(key), v.dump());
    return v.get<int64_t>();
  }

  const json& object_;
  std::string prefix_;
  const std::string& source_;
};

void parse_feed_forward(const Fields& f, ModelConfig& c) {
  int64_t experts = f.positive_or("num_local_experts", 0);
  if (experts == 0) experts = f.positive_or("num_experts", 0);
  if (experts == 0) {  // a dense model: every layer has one MLP of intermediate_size
    c.moe_layer.assign(static_cast<size_t>(c.num_layers), false);
    c.dense_intermediate_size = f.positive("intermediate_size");
    return;
  }
  c.num_experts = experts;
  c.num_experts_per_tok = f.positive("num_experts_per_tok");
  c.routing_bias = f.flag_or("use_routing_bias", false);
  FP4_CHECK(c.num_experts_per_tok <= experts, "{}: {} = {} exceeds the {} experts", c.source,
            f.path("num_experts_per_tok"), c.num_experts_per_tok, experts);
  c.moe_layer = f.find("moe_layer_freq") != nullptr
                    ? f.layer_flags("moe_layer_freq", c.num_layers)
                    : std::vector<bool>(static_cast<size_t>(c.num_layers), true);
  // MiniMax names the expert width intermediate_size and the dense MLP's
  // dense_intermediate_size; Qwen-style configs use moe_intermediate_size and intermediate_size.
  const bool qwen_names = f.find("moe_intermediate_size") != nullptr;
  c.moe_intermediate_size = f.positive(qwen_names ? "moe_intermediate_size" : "intermediate_size");
  if (c.count_moe_layers() < c.num_layers) {
    c.dense_intermediate_size =
        f.positive(qwen_names ? "intermediate_size" : "dense_intermediate_size");
  }
  if (f.find("shared_intermediate_size") != nullptr) {
    c.shared_intermediate_size = f.positive("shared_intermediate_size");
  } else if (f.find("shared_expert_intermediate_size") != nullptr) {
    c.shared_intermediate_size = f.positive("shared_expert_intermediate_size");
  } else {
    c.shared_intermediate_size = f.positive_or("n_shared_experts", 0) * c.moe_intermediate_size;
  }
}

void parse_sparse_attention(const json& text, const std::string& prefix, ModelConfig& c) {
  c.sparse_layer.assign(static_cast<size_t>(c.num_layers), false);
  auto it = text.find("sparse_attention_config");
  if (it == text.end() || it->is_null()) return;
  FP4_CHECK(it->is_object(), "{}: {}sparse_attention_config is {}, expected an object",
            c.source, prefix, it->dump());
  const Fields sparse(*it, prefix + "sparse_attention_config.", c.source);
  if (!sparse.flag_or("use_sparse_attention", false)) return;
  c.sparse_layer = sparse.layer_flags("sparse_attention_freq", c.num_layers);
  c.index_head_dim = sparse.positive("sparse_index_dim");
  c.num_index_heads = sparse.positive("sparse_num_index_heads");
  c.sparse_block_size = sparse.positive("sparse_block_size");
  c.sparse_topk_blocks = sparse.positive_or("sparse_topk_blocks", 16);
  c.sparse_init_blocks = sparse.non_negative_or("sparse_init_block", 0);
  c.sparse_local_blocks = sparse.non_negative_or("sparse_local_block", 1);
  FP4_CHECK(c.sparse_init_blocks + c.sparse_local_blocks <= c.sparse_topk_blocks,
            "{}: {}sparse_attention_config forces {} init + {} local blocks, more than "
            "sparse_topk_blocks = {}", c.source, prefix, c.sparse_init_blocks,
            c.sparse_local_blocks, c.sparse_topk_blocks);
  const std::string score = sparse.string_or("sparse_score_type", "max");
  FP4_CHECK(score == "max", "{}: {} is \"{}\"; only \"max\" block scores are supported", c.source,
            sparse.path("sparse_score_type"), score);
  FP4_CHECK(c.num_index_heads == c.num_kv_heads,
            "{}: {} = {} must equal num_key_value_heads = {} (one index head per KV head)",
            c.source, sparse.path("sparse_num_index_heads"), c.num_index_heads, c.num_kv_heads);
}

void parse_numerics(const Fields& f, ModelConfig& c) {
  c.rms_norm_eps = f.number_or("rms_norm_eps", 1e-6);
  FP4_CHECK(c.rms_norm_eps > 0, "{}: {} is {}, expected a positive number", c.source,
            f.path("rms_norm_eps"), c.rms_norm_eps);
  c.gemma_norm = f.flag_or("use_gemma_norm", false);
  c.rope_theta = f.number_or("rope_theta", 10000.0);
  FP4_CHECK(c.rope_theta > 1, "{}: {} is {}, expected a number above 1", c.source,
            f.path("rope_theta"), c.rope_theta);
  if (f.find("rotary_dim") != nullptr) {
    c.rotary_dim = f.positive("rotary_dim");
  } else {
    const double factor = f.number_or("partial_rotary_factor", 1.0);
    c.rotary_dim = static_cast<int64_t>(std::lround(factor * static_cast<double>(c.head_dim)));
  }
  FP4_CHECK(c.rotary_dim > 0 && c.rotary_dim <= c.head_dim && c.rotary_dim % 2 == 0,
            "{}: the rotary dimension {} must be even and within head_dim {}", c.source,
            c.rotary_dim, c.head_dim);
  const std::string act = f.string_or("hidden_act", "silu");
  if (act == "silu") {
    c.activation = ModelConfig::Activation::kSilu;
  } else if (act == "swigluoai") {
    c.activation = ModelConfig::Activation::kSwigluOai;
  } else {
    FP4_CHECK(false, "{}: {} is \"{}\"; supported: \"silu\", \"swigluoai\"", c.source,
              f.path("hidden_act"), act);
  }
  c.swiglu_alpha = static_cast<float>(f.number_or("swiglu_alpha", 1.702));
  c.swiglu_limit = static_cast<float>(f.number_or("swiglu_limit", 7.0));
  c.swiglu_beta = static_cast<float>(f.number_or("swiglu_beta", 1.0));
  c.routed_scaling_factor = static_cast<float>(f.number_or("routed_scaling_factor", 1.0));
  if (c.is_moe()) {
    const std::string scoring = f.string_or("scoring_func", "sigmoid");
    FP4_CHECK(scoring == "sigmoid", "{}: {} is \"{}\"; only \"sigmoid\" routing is supported",
              c.source, f.path("scoring_func"), scoring);
  }
  const std::vector<int64_t> bos = f.ids_or_empty("bos_token_id");
  c.bos_token_id = bos.empty() ? -1 : bos.front();
  c.eos_token_ids = f.ids_or_empty("eos_token_id");
}

}  // namespace

int64_t ModelConfig::count_moe_layers() const {
  int64_t n = 0;
  for (bool b : moe_layer) n += b;
  return n;
}

int64_t ModelConfig::count_sparse_layers() const {
  int64_t n = 0;
  for (bool b : sparse_layer) n += b;
  return n;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  const json root = parse_json_object(json_text, source);
  ModelConfig c;
  c.source = source;
  if (auto a = root.find("architectures"); a != root.end() && a->is_array() && !a->empty() &&
                                           (*a)[0].is_string()) {
    c.architecture = (*a)[0].get<std::string>();
  }
  const bool nested = root.contains("text_config") && !root["text_config"].is_null();
  FP4_CHECK(!nested || root["text_config"].is_object(), "{}: text_config is {}, expected an object",
            source, root["text_config"].dump());
  const json& text = nested ? root["text_config"] : root;
  const std::string prefix = nested ? "text_config." : "";
  const Fields f(text, prefix, c.source);

  c.hidden_size = f.positive("hidden_size");
  c.num_layers = f.positive("num_hidden_layers");
  c.num_heads = f.positive("num_attention_heads");
  c.num_kv_heads = f.positive_or("num_key_value_heads", c.num_heads);
  FP4_CHECK(c.num_heads % c.num_kv_heads == 0,
            "{}: {} = {} is not a multiple of {} = {}", source, f.path("num_attention_heads"),
            c.num_heads, f.path("num_key_value_heads"), c.num_kv_heads);
  if (f.find("head_dim") == nullptr) {
    FP4_CHECK(c.hidden_size % c.num_heads == 0,
              "{}: {} is missing and hidden_size {} is not a multiple of {} heads", source,
              f.path("head_dim"), c.hidden_size, c.num_heads);
  }
  c.head_dim = f.positive_or("head_dim", c.hidden_size / c.num_heads);
  c.vocab_size = f.positive("vocab_size");
  c.tie_word_embeddings = f.flag_or("tie_word_embeddings", false);
  c.max_position_embeddings = f.positive_or("max_position_embeddings", 0);
  c.qk_norm = f.flag_or("use_qk_norm", false);
  parse_feed_forward(f, c);
  parse_sparse_attention(text, prefix, c);
  parse_numerics(f, c);
  // Token ids live at the top level of multimodal configs.
  if (nested && c.bos_token_id < 0 && c.eos_token_ids.empty()) {
    const Fields top(root, "", c.source);
    const std::vector<int64_t> bos = top.ids_or_empty("bos_token_id");
    c.bos_token_id = bos.empty() ? -1 : bos.front();
    c.eos_token_ids = top.ids_or_empty("eos_token_id");
  }
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path file = path;
  std::error_code ec;
  if (fs::is_directory(file, ec)) file /= "config.json";
  std::ifstream in(file, std::ios::binary);
  FP4_CHECK(in.good(), "cannot read model config {}", file.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse_model_config(text.str(), file.string());
}

kvcache::KvGeometry kv_geometry(const ModelConfig& c) {
  const int64_t sparse = c.count_sparse_layers();
  FP4_CHECK(sparse == 0 || c.sparse_block_size == kvcache::kPageTokens,
            "{}: sparse_block_size {} differs from the {}-token KV page; one page must be one "
            "MSA block", c.source, c.sparse_block_size, kvcache::kPageTokens);
  kvcache::KvGeometry g;
  g.num_kv_heads = static_cast<int>(c.num_kv_heads);
  g.head_dim = static_cast<int>(c.head_dim);
  g.num_dense_layers = static_cast<int>(c.num_layers - sparse);
  g.num_sparse_layers = static_cast<int>(sparse);
  g.index_head_dim = static_cast<int>(c.index_head_dim);
  g.page_tokens = kvcache::kPageTokens;
  return g;
}

}  // namespace fp4::model
