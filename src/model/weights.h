// How many bytes a model's weights take, as a list of tensor groups that each know their class
// (embedding, attention, routed experts, ...) and how a deployment splits them across GPUs.
// The groups come either from config.json plus a quantization scheme (count_weights) or from a
// checkpoint's safetensors headers (safetensors.h); both feed the same per-GPU arithmetic.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace fp4::model {

// Which tensors a checkpoint stores in which format.
enum class QuantScheme : uint8_t {
  kBF16,          // everything BF16 (router FP32)
  kMXFP8,         // attention, index branch and routed experts MXFP8; the rest BF16/FP32
  kNVFP4Experts,  // routed experts NVFP4, attention and index branch MXFP8; the rest BF16/FP32
};

std::string_view quant_scheme_name(QuantScheme scheme);
QuantScheme parse_quant_scheme(std::string_view text);  // "bf16", "mxfp8", "nvfp4-experts"

enum class WeightFormat : uint8_t { kBF16, kFP32, kMXFP8, kNVFP4, kStored };
std::string_view weight_format_name(WeightFormat format);

enum class WeightClass : uint8_t {
  kEmbedding,
  kAttention,      // q, k, v, o projections
  kIndex,          // MSA index branch: index_q and index_k projections
  kRouter,         // MoE gate and routing bias
  kSharedExpert,
  kRoutedExperts,
  kDenseMlp,       // the MLP of non-MoE layers
  kLmHead,
  kNorms,
  kMtp,            // multi-token-prediction heads: stored, not loaded for plain serving
  kOther,          // anything else a checkpoint holds (e.g. a vision tower)
};
std::string_view weight_class_name(WeightClass cls);

// How a deployment splits a tensor over GPUs. Data-parallel ranks each hold their own copy of
// everything except the routed experts; inside a rank, tensor parallelism (tp GPUs) splits
// the rest; routed experts are spread over `ep` GPUs.
enum class Sharding : uint8_t {
  kReplicated,      // every GPU holds all of it (norms, router, the single index-K head)
  kTensorParallel,  // split evenly over the tp GPUs of a rank
  kHeads,           // split by attention head; a head is replicated when tp exceeds `heads`
  kExperts,         // whole routed experts spread over ep GPUs
  kNotLoaded,       // present in the checkpoint, not loaded for serving
};

struct WeightGroup {
  WeightClass cls = WeightClass::kOther;
  std::string name;    // a tensor name pattern, e.g. "layers.*.self_attn.q_proj"
  WeightFormat format = WeightFormat::kStored;
  std::string stored_dtype;  // for kStored: the checkpoint's dtype ("BF16", "U8", ...)
  int64_t count = 0;   // tensors in the group
  int64_t params = 0;  // parameters (for a checkpoint: stored elements)
  int64_t bytes = 0;   // stored bytes, block scales included
  Sharding sharding = Sharding::kReplicated;
  int64_t heads = 0;   // for kHeads: how many heads the tensor holds
};

struct WeightBreakdown {
  std::string origin;       // what the numbers come from, for reports
  int64_t num_experts = 0;  // routed experts per MoE layer (for kExperts)
  std::vector<WeightGroup> groups;

  int64_t total_bytes() const;
  int64_t total_params() const;
  int64_t bytes_of(WeightClass cls) const;
  int64_t params_of(WeightClass cls) const;
};

// Stored bytes of one [rows, cols] weight in a format; rows are output features, blocks run
// along cols (the input dimension) and a partial block is padded to a whole one.
int64_t weight_tensor_bytes(WeightFormat format, int64_t rows, int64_t cols);

// Counts every weight of the language model described by `config` (the vision tower and MTP or
// draft heads are not part of config.json's text backbone and are not counted).
WeightBreakdown count_weights(const ModelConfig& config, QuantScheme scheme);

// A declared checkpoint size: the routed experts as counted by `computed`, and the rest of the
// declared bytes as one tensor-parallel group. Throws when the declared size is smaller than
// the routed experts alone.
WeightBreakdown declared_weights(const WeightBreakdown& computed, int64_t declared_bytes);

// Where each GPU of a deployment sits: tp GPUs per data-parallel rank, routed experts spread
// over ep GPUs.
struct Placement {
  int tp = 1;
  int ep = 1;
};

int64_t group_bytes_per_gpu(const WeightGroup& group, const Placement& placement,
                            int64_t num_experts);
int64_t weights_bytes_per_gpu(const WeightBreakdown& weights, const Placement& placement);
int64_t class_bytes_per_gpu(const WeightBreakdown& weights, WeightClass cls,
                            const Placement& placement);

// Class and sharding of a checkpoint tensor, from its name (vLLM/HF naming, with or without a
// "language_model." prefix). `num_kv_heads` and `num_index_heads` fill WeightGroup::heads.
WeightGroup classify_tensor(const std::string& name, int64_t num_kv_heads,
                            int64_t num_index_heads);

}  // namespace fp4::model
