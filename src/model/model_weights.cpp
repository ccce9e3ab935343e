#include "model/model_weights.h"

#include <fmt/format.h>

#include <cmath>

#include "core/check.h"

namespace fp4::model {
namespace {

class Loader {
 public:
  Loader(const Checkpoint& ckpt, const ModelConfig& c) : ckpt_(ckpt) {
    // Multimodal checkpoints put the language model under `language_model.`.
    for (const char* p : {"", "language_model."}) {
      if (ckpt.find(std::string(p) + "model.embed_tokens.weight") != nullptr) prefix_ = p;
    }
    (void)c;
  }

  bool has(const std::string& name) const { return ckpt_.find(prefix_ + name) != nullptr; }

  LinearWeight linear(const std::string& module, int64_t out, int64_t in) const {
    const std::string name = prefix_ + module + ".weight";
    LinearWeight l;
    l.w = ckpt_.load_f32(name, {out, in});
    l.out = out;
    l.in = in;
    l.format = std::string(ckpt_.describe(name));
    return l;
  }
  // Appends `module`'s weight to `stack` when it is NVFP4; false (and nothing read) otherwise.
  bool append_nvfp4(const std::string& module, int64_t out, int64_t in, Nvfp4Experts& stack) const {
    const auto view = ckpt_.nvfp4_view(prefix_ + module + ".weight", out, in);
    if (!view) return false;
    stack.values.insert(stack.values.end(), view->codes.begin(), view->codes.end());
    stack.scales.insert(stack.scales.end(), view->scales.begin(), view->scales.end());
    stack.global_scales.push_back(view->global_scale);
    stack.n = out;
    stack.k = in;
    return true;
  }
  bool is_nvfp4(const std::string& module) const {
    return ckpt_.describe(prefix_ + module + ".weight") == "nvfp4";
  }
  std::vector<float> vector(const std::string& name, int64_t n) const {
    return ckpt_.load_f32(prefix_ + name, {n});
  }
  // An optional scalar, stored with shape [] or [1]; it must be finite and positive.
  float scale_or_one(const std::string& name) const {
    const TensorRef* t = ckpt_.find(prefix_ + name);
    if (t == nullptr) return 1.0f;
    const std::vector<float> v = ckpt_.load_f32(prefix_ + name, t->shape);
    FP4_CHECK(v.size() == 1 && std::isfinite(v[0]) && v[0] > 0,
              "{}{}: expected one finite positive scale, got {} values", prefix_, name, v.size());
    return v[0];
  }

 private:
  const Checkpoint& ckpt_;
  std::string prefix_;
};

MlpWeights load_mlp(const Loader& l, const std::string& base, const char* gate, const char* up,
                    const char* down, int64_t hidden, int64_t inter) {
  MlpWeights m;
  m.gate = l.linear(base + gate, inter, hidden);
  m.up = l.linear(base + up, inter, hidden);
  m.down = l.linear(base + down, hidden, inter);
  return m;
}

AttentionWeights load_attention(const Loader& l, const std::string& base, const ModelConfig& c,
                                bool sparse) {
  AttentionWeights a;
  const int64_t h = c.hidden_size, d = c.head_dim;
  a.q = l.linear(base + "q_proj", c.num_heads * d, h);
  a.k = l.linear(base + "k_proj", c.num_kv_heads * d, h);
  a.v = l.linear(base + "v_proj", c.num_kv_heads * d, h);
  a.o = l.linear(base + "o_proj", h, c.num_heads * d);
  a.k_scale = l.scale_or_one(base + "k_scale");
  a.v_scale = l.scale_or_one(base + "v_scale");
  if (c.qk_norm) {
    a.q_norm = l.vector(base + "q_norm.weight", d);
    a.k_norm = l.vector(base + "k_norm.weight", d);
  }
  if (sparse) {
    const int64_t di = c.index_head_dim;
    a.index_q = l.linear(base + "index_q_proj", c.num_index_heads * di, h);
    a.index_k = l.linear(base + "index_k_proj", di, h);
    if (c.qk_norm) {
      a.index_q_norm = l.vector(base + "index_q_norm.weight", di);
      a.index_k_norm = l.vector(base + "index_k_norm.weight", di);
    }
  }
  return a;
}

MoeWeights load_moe(const Loader& l, const std::string& base, const ModelConfig& c) {
  MoeWeights m;
  const int64_t h = c.hidden_size;
  m.router = l.linear(base + "gate", c.num_experts, h);
  if (c.routing_bias) m.bias = l.vector(base + "e_score_correction_bias", c.num_experts);
  const int64_t inter = c.moe_intermediate_size;
  // NVFP4 as stored when every routed projection is NVFP4 and the W4A16 kernel takes the shapes.
  m.nvfp4 = w4a16_expert_shapes(h, inter);
  for (int64_t e = 0; e < c.num_experts && m.nvfp4; ++e) {
    for (const char* w : {"w1", "w3", "w2"}) m.nvfp4 = m.nvfp4 && l.is_nvfp4(fmt::format("{}experts.{}.{}", base, e, w));
  }
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const std::string expert = fmt::format("{}experts.{}.", base, e);
    if (m.nvfp4) {
      const bool stacked = l.append_nvfp4(expert + "w1", inter, h, m.gate) &&
                           l.append_nvfp4(expert + "w3", inter, h, m.up) &&
                           l.append_nvfp4(expert + "w2", h, inter, m.down);
      FP4_CHECK(stacked, "{}: an expert projection checked as NVFP4 did not read as NVFP4", expert);
    } else {
      m.experts.push_back(load_mlp(l, expert, "w1", "w3", "w2", h, inter));
    }
  }
  m.has_shared = c.shared_intermediate_size > 0;
  if (m.has_shared) {
    m.shared = load_mlp(l, base + "shared_experts.", "gate_proj", "up_proj", "down_proj", h,
                        c.shared_intermediate_size);
  }
  return m;
}

}  // namespace

ModelWeights load_model_weights(const Checkpoint& checkpoint, const ModelConfig& c) {
  const Loader l(checkpoint, c);
  FP4_CHECK(c.rotary_dim <= c.index_head_dim || c.count_sparse_layers() == 0,
            "{}: rotary dimension {} exceeds the index head dimension {}", c.source, c.rotary_dim,
            c.index_head_dim);
  ModelWeights w;
  w.embed = l.linear("model.embed_tokens", c.vocab_size, c.hidden_size);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string base = fmt::format("model.layers.{}.", i);
    LayerWeights layer;
    layer.sparse = c.sparse_layer[i];
    layer.moe = c.moe_layer[i];
    layer.input_norm = l.vector(base + "input_layernorm.weight", c.hidden_size);
    layer.post_attention_norm = l.vector(base + "post_attention_layernorm.weight", c.hidden_size);
    layer.attn = load_attention(l, base + "self_attn.", c, layer.sparse);
    if (layer.moe) {
      layer.moe_weights = load_moe(l, base + "block_sparse_moe.", c);
    } else {
      layer.mlp = load_mlp(l, base + "mlp.", "gate_proj", "up_proj", "down_proj", c.hidden_size,
                           c.dense_intermediate_size);
    }
    w.layers.push_back(std::move(layer));
  }
  w.final_norm = l.vector("model.norm.weight", c.hidden_size);
  // A tied model may still ship lm_head; an untied one must.
  if (!c.tie_word_embeddings || l.has("lm_head.weight")) {
    w.lm_head = l.linear("lm_head", c.vocab_size, c.hidden_size);
  }
  checkpoint.finish_progress();
  return w;
}

}  // namespace fp4::model
