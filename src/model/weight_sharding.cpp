// Per-GPU weight bytes and the classification of checkpoint tensor names.
#include <algorithm>

#include "core/check.h"
#include "core/int_math.h"
#include "model/weights.h"

namespace fp4::model {
namespace {

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

int64_t group_bytes_per_gpu(const WeightGroup& g, const Placement& p, int64_t num_experts) {
  FP4_CHECK(p.tp > 0 && p.ep > 0, "placement needs positive tp and ep, got {} and {}", p.tp, p.ep);
  switch (g.sharding) {
    case Sharding::kReplicated: return g.bytes;
    case Sharding::kTensorParallel: return ceil_div(g.bytes, p.tp);
    case Sharding::kHeads: {
      FP4_CHECK(g.heads > 0, "weight group {} is split by heads but has none", g.name);
      // Each GPU keeps max(1, heads / tp) heads' worth of the tensor.
      const int64_t heads_per_gpu = std::max<int64_t>(1, g.heads / p.tp);
      return ceil_div(g.bytes * heads_per_gpu, g.heads);
    }
    case Sharding::kExperts: {
      FP4_CHECK(num_experts > 0, "weight group {} holds routed experts but the model has none",
                g.name);
      // Whole experts: with an uneven split the fullest GPU decides what fits.
      const int64_t experts_per_gpu = ceil_div(num_experts, p.ep);
      return ceil_div(g.bytes * experts_per_gpu, num_experts);
    }
    case Sharding::kNotLoaded: return 0;
  }
  return g.bytes;
}

int64_t weights_bytes_per_gpu(const WeightBreakdown& w, const Placement& p) {
  int64_t n = 0;
  for (const auto& g : w.groups) n += group_bytes_per_gpu(g, p, w.num_experts);
  return n;
}

int64_t class_bytes_per_gpu(const WeightBreakdown& w, WeightClass cls, const Placement& p) {
  int64_t n = 0;
  for (const auto& g : w.groups) n += g.cls == cls ? group_bytes_per_gpu(g, p, w.num_experts) : 0;
  return n;
}

WeightGroup classify_tensor(const std::string& name, int64_t num_kv_heads,
                            int64_t num_index_heads) {
  WeightGroup g;
  g.name = name;
  g.count = 1;
  auto set = [&g](WeightClass cls, Sharding sharding, int64_t heads = 0) {
    g.cls = cls;
    g.sharding = sharding;
    g.heads = heads;
    return g;
  };
  using WC = WeightClass;
  using S = Sharding;
  // Order matters: "mtp.layers.0.self_attn.q_norm" is an MTP tensor before it is a norm, and
  // "self_attn.q_norm" is a norm before it is attention.
  if (contains(name, "mtp.")) return set(WC::kMtp, S::kNotLoaded);
  if (contains(name, "vision") || contains(name, "visual") || contains(name, "multi_modal") ||
      contains(name, "mm_projector")) {
    return set(WC::kOther, S::kReplicated);
  }
  if (contains(name, "embed_tokens")) return set(WC::kEmbedding, S::kTensorParallel);
  if (contains(name, "lm_head")) return set(WC::kLmHead, S::kTensorParallel);
  if (contains(name, "shared_expert")) return set(WC::kSharedExpert, S::kTensorParallel);
  if (contains(name, ".experts.")) return set(WC::kRoutedExperts, S::kExperts);
  if (contains(name, "e_score_correction_bias") || contains(name, "block_sparse_moe.gate.") ||
      contains(name, "mlp.gate.")) {
    return set(WC::kRouter, S::kReplicated);
  }
  if (contains(name, "norm")) return set(WC::kNorms, S::kReplicated);
  if (contains(name, "index_q_proj")) return set(WC::kIndex, S::kHeads, num_index_heads);
  if (contains(name, "index_k_proj")) return set(WC::kIndex, S::kReplicated);
  if (contains(name, "self_attn.")) {
    if (contains(name, "k_proj") || contains(name, "v_proj")) {
      return set(WC::kAttention, S::kHeads, num_kv_heads);
    }
    if (contains(name, "q_proj") || contains(name, "o_proj")) {
      return set(WC::kAttention, S::kTensorParallel);
    }
    return set(WC::kAttention, S::kReplicated);  // per-layer scales such as k_scale
  }
  if (contains(name, "mlp.")) return set(WC::kDenseMlp, S::kTensorParallel);
  return set(WC::kOther, S::kReplicated);
}

}  // namespace fp4::model
