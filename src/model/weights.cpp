#include "model/weights.h"

#include "core/check.h"
#include "core/int_math.h"
#include "formats/mxfp8.h"
#include "formats/nvfp4.h"

namespace fp4::model {
namespace {

int64_t round_up(int64_t x, int64_t multiple) { return ceil_div(x, multiple) * multiple; }

// The formats each scheme uses. The MXFP8 scheme keeps exactly the tensors the official
// M3.1-Flash checkpoint keeps outside NVFP4 in the same formats, so the two schemes differ only
// in the routed experts, the class that checkpoint stores in NVFP4.
WeightFormat format_for(WeightClass cls, QuantScheme scheme) {
  switch (cls) {
    case WeightClass::kRouter: return WeightFormat::kFP32;  // routing is computed in FP32
    case WeightClass::kAttention:
    case WeightClass::kIndex:
      return scheme == QuantScheme::kBF16 ? WeightFormat::kBF16 : WeightFormat::kMXFP8;
    case WeightClass::kRoutedExperts:
      switch (scheme) {
        case QuantScheme::kBF16: return WeightFormat::kBF16;
        case QuantScheme::kMXFP8: return WeightFormat::kMXFP8;
        case QuantScheme::kNVFP4Experts: return WeightFormat::kNVFP4;
      }
      break;
    default: break;
  }
  return WeightFormat::kBF16;
}

class Counter {
 public:
  Counter(QuantScheme scheme, WeightBreakdown& out) : scheme_(scheme), out_(out) {}

  // `count` identical [rows, cols] tensors.
  void add(WeightClass cls, std::string name, int64_t count, int64_t rows, int64_t cols,
           Sharding sharding, int64_t heads = 0) {
    if (count == 0) return;
    const WeightFormat format = format_for(cls, scheme_);
    WeightGroup g;
    g.cls = cls;
    g.name = std::move(name);
    g.format = format;
    g.count = count;
    g.params = count * rows * cols;
    g.bytes = count * weight_tensor_bytes(format, rows, cols);
    g.sharding = sharding;
    g.heads = heads;
    out_.groups.push_back(std::move(g));
  }

 private:
  QuantScheme scheme_;
  WeightBreakdown& out_;
};

}  // namespace

std::string_view quant_scheme_name(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kBF16: return "bf16";
    case QuantScheme::kMXFP8: return "mxfp8";
    case QuantScheme::kNVFP4Experts: return "nvfp4-experts";
  }
  return "?";
}

QuantScheme parse_quant_scheme(std::string_view text) {
  if (text == "bf16") return QuantScheme::kBF16;
  if (text == "mxfp8") return QuantScheme::kMXFP8;
  if (text == "nvfp4-experts") return QuantScheme::kNVFP4Experts;
  fail("--quantization '{}' is not a known scheme; expected bf16, mxfp8 or nvfp4-experts", text);
}

std::string_view weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kFP32: return "fp32";
    case WeightFormat::kMXFP8: return "mxfp8";
    case WeightFormat::kNVFP4: return "nvfp4";
    case WeightFormat::kStored: return "stored";
  }
  return "?";
}

std::string_view weight_class_name(WeightClass cls) {
  switch (cls) {
    case WeightClass::kEmbedding: return "embedding";
    case WeightClass::kAttention: return "attention";
    case WeightClass::kIndex: return "index branch";
    case WeightClass::kRouter: return "router";
    case WeightClass::kSharedExpert: return "shared expert";
    case WeightClass::kRoutedExperts: return "routed experts";
    case WeightClass::kDenseMlp: return "dense MLP";
    case WeightClass::kLmHead: return "lm head";
    case WeightClass::kNorms: return "norms";
    case WeightClass::kMtp: return "MTP heads";
    case WeightClass::kOther: return "other";
  }
  return "?";
}

int64_t weight_tensor_bytes(WeightFormat format, int64_t rows, int64_t cols) {
  FP4_CHECK(rows > 0 && cols > 0, "a weight needs a positive shape, got [{}, {}]", rows, cols);
  switch (format) {
    case WeightFormat::kBF16: return 2 * rows * cols;
    case WeightFormat::kFP32: return 4 * rows * cols;
    case WeightFormat::kMXFP8: {
      const int64_t padded = round_up(cols, kMxfp8BlockElems);
      return mxfp8_value_bytes(rows, cols) + mxfp8_scale_bytes(rows, padded);
    }
    case WeightFormat::kNVFP4: {
      // ModelOpt stores two FP32 per-tensor scales next to each NVFP4 weight: weight_scale_2
      // and the activation's input_scale.
      const int64_t padded = round_up(cols, kNvfp4BlockElems);
      return nvfp4_code_bytes(rows, padded) + nvfp4_scale_bytes(rows, padded) + 2 * 4;
    }
    case WeightFormat::kStored: break;
  }
  fail("weight_tensor_bytes: a stored tensor's size comes from its checkpoint header");
}

WeightBreakdown count_weights(const ModelConfig& c, QuantScheme scheme) {
  WeightBreakdown w;
  w.origin = fmt::format("computed from config.json, quantization {}", quant_scheme_name(scheme));
  w.num_experts = c.num_experts;
  Counter add(scheme, w);
  const int64_t h = c.hidden_size, L = c.num_layers;
  const int64_t q_width = c.num_heads * c.head_dim, kv_width = c.num_kv_heads * c.head_dim;
  const int64_t sparse = c.count_sparse_layers(), moe = c.count_moe_layers(), dense = L - moe;
  using WC = WeightClass;
  using S = Sharding;

  add.add(WC::kEmbedding, "embed_tokens", 1, c.vocab_size, h, S::kTensorParallel);
  add.add(WC::kAttention, "layers.*.self_attn.q_proj", L, q_width, h, S::kTensorParallel);
  add.add(WC::kAttention, "layers.*.self_attn.k_proj", L, kv_width, h, S::kHeads, c.num_kv_heads);
  add.add(WC::kAttention, "layers.*.self_attn.v_proj", L, kv_width, h, S::kHeads, c.num_kv_heads);
  add.add(WC::kAttention, "layers.*.self_attn.o_proj", L, h, q_width, S::kTensorParallel);
  add.add(WC::kIndex, "layers.*.self_attn.index_q_proj", sparse,
          c.num_index_heads * c.index_head_dim, h, S::kHeads, c.num_index_heads);
  // A single index-K head serves every index head, so each TP rank keeps all of it.
  add.add(WC::kIndex, "layers.*.self_attn.index_k_proj", sparse, c.index_head_dim, h,
          S::kReplicated);
  add.add(WC::kRouter, "layers.*.block_sparse_moe.gate", moe, c.num_experts, h, S::kReplicated);
  if (c.routing_bias) {
    add.add(WC::kRouter, "layers.*.block_sparse_moe.e_score_correction_bias", moe, 1,
            c.num_experts, S::kReplicated);
  }
  const int64_t I = c.moe_intermediate_size, E = c.num_experts;
  add.add(WC::kRoutedExperts, "layers.*.block_sparse_moe.experts.*.w1", moe * E, I, h,
          S::kExperts);
  add.add(WC::kRoutedExperts, "layers.*.block_sparse_moe.experts.*.w3", moe * E, I, h,
          S::kExperts);
  add.add(WC::kRoutedExperts, "layers.*.block_sparse_moe.experts.*.w2", moe * E, h, I,
          S::kExperts);
  if (c.shared_intermediate_size > 0) {
    const int64_t Is = c.shared_intermediate_size;
    add.add(WC::kSharedExpert, "layers.*.shared_experts.gate_proj", moe, Is, h,
            S::kTensorParallel);
    add.add(WC::kSharedExpert, "layers.*.shared_experts.up_proj", moe, Is, h, S::kTensorParallel);
    add.add(WC::kSharedExpert, "layers.*.shared_experts.down_proj", moe, h, Is,
            S::kTensorParallel);
  }
  const int64_t Id = c.dense_intermediate_size;
  if (dense > 0) {
    add.add(WC::kDenseMlp, "layers.*.mlp.gate_proj", dense, Id, h, S::kTensorParallel);
    add.add(WC::kDenseMlp, "layers.*.mlp.up_proj", dense, Id, h, S::kTensorParallel);
    add.add(WC::kDenseMlp, "layers.*.mlp.down_proj", dense, h, Id, S::kTensorParallel);
  }
  add.add(WC::kNorms, "layers.*.{input,post_attention}_layernorm", 2 * L, 1, h, S::kReplicated);
  if (c.qk_norm) {
    // Per-head norms share one weight vector across heads.
    add.add(WC::kNorms, "layers.*.self_attn.{q,k}_norm", 2 * L, 1, c.head_dim, S::kReplicated);
  }
  add.add(WC::kNorms, "layers.*.self_attn.index_{q,k}_norm", 2 * sparse, 1, c.index_head_dim,
          S::kReplicated);
  add.add(WC::kNorms, "norm", 1, 1, h, S::kReplicated);
  if (!c.tie_word_embeddings) {
    add.add(WC::kLmHead, "lm_head", 1, c.vocab_size, h, S::kTensorParallel);
  }
  return w;
}

WeightBreakdown declared_weights(const WeightBreakdown& computed, int64_t declared_bytes) {
  WeightBreakdown w;
  w.origin = fmt::format("declared total {} bytes; routed experts {}", declared_bytes,
                         computed.origin);
  w.num_experts = computed.num_experts;
  for (const WeightGroup& g : computed.groups) {
    if (g.cls == WeightClass::kRoutedExperts) w.groups.push_back(g);
  }
  const int64_t experts = w.total_bytes();
  FP4_CHECK(declared_bytes >= experts,
            "--weights-bytes {} is smaller than the routed experts alone ({} bytes, {})",
            declared_bytes, experts, computed.origin);
  WeightGroup rest;
  rest.cls = WeightClass::kOther;
  rest.name = "everything but the routed experts (declared total - computed experts)";
  rest.count = 1;
  rest.bytes = declared_bytes - experts;
  rest.sharding = Sharding::kTensorParallel;
  w.groups.push_back(rest);
  return w;
}

int64_t WeightBreakdown::total_bytes() const {
  int64_t n = 0;
  for (const auto& g : groups) n += g.bytes;
  return n;
}

int64_t WeightBreakdown::total_params() const {
  int64_t n = 0;
  for (const auto& g : groups) n += g.params;
  return n;
}

int64_t WeightBreakdown::bytes_of(WeightClass cls) const {
  int64_t n = 0;
  for (const auto& g : groups) n += g.cls == cls ? g.bytes : 0;
  return n;
}

int64_t WeightBreakdown::params_of(WeightClass cls) const {
  int64_t n = 0;
  for (const auto& g : groups) n += g.cls == cls ? g.params : 0;
  return n;
}

}  // namespace fp4::model
