// A model's config.json, reduced to the typed fields that size its weights and caches.
// Hugging Face multimodal configs keep the language model under "text_config"; we read that
// object when it exists and the top level otherwise. Every missing or ill-typed key is an
// error that names the file and the key's full path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvcache/sizing.h"

namespace fp4::model {

struct ModelConfig {
  std::string source;        // file path or preset name, used in messages
  std::string architecture;  // architectures[0], empty when absent

  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;
  bool qk_norm = false;     // per-head RMSNorm of q and k (and of the index vectors)

  // Numerics of the forward pass.
  double rms_norm_eps = 1e-6;
  bool gemma_norm = false;   // RMSNorm multiplies by (1 + w) instead of w
  double rope_theta = 10000.0;
  int64_t rotary_dim = 0;    // leading dims of each head that RoPE rotates (half-split pairs)
  enum class Activation { kSilu, kSwigluOai } activation = Activation::kSilu;
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;
  float swiglu_beta = 1.0f;
  float routed_scaling_factor = 1.0f;
  int64_t bos_token_id = -1;  // -1 when the config does not say
  std::vector<int64_t> eos_token_ids;

  // Feed-forward. A layer is either dense (one MLP of dense_intermediate_size) or MoE
  // (num_experts routed experts of moe_intermediate_size each, top num_experts_per_tok, plus
  // shared experts of shared_intermediate_size in total).
  std::vector<bool> moe_layer;  // per layer
  int64_t dense_intermediate_size = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_intermediate_size = 0;
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  bool routing_bias = false;  // an FP32 per-expert selection bias (e_score_correction_bias)

  // MiniMax Sparse Attention. Sparse layers add an index branch: num_index_heads query heads
  // and a single key head, all of width index_head_dim.
  std::vector<bool> sparse_layer;  // per layer
  int64_t index_head_dim = 0;
  int64_t num_index_heads = 0;
  int64_t sparse_block_size = 0;
  int64_t sparse_topk_blocks = 0;  // blocks each (KV head, query) attends to, forced ones included
  int64_t sparse_init_blocks = 0;  // blocks [0, n) always selected
  int64_t sparse_local_blocks = 0; // the query's own block (and n - 1 before it) always selected

  int64_t count_moe_layers() const;
  int64_t count_sparse_layers() const;
  bool is_moe() const { return num_experts > 0; }
};

// Parses config.json text. `source` names the file or preset in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);

// Reads `path` (a config.json, or a directory holding one).
ModelConfig load_model_config(const std::string& path);

// The cache geometry the kvcache layer sizes pages from. Checks that the model's sparse block
// equals the page size, since one page must be exactly one MSA block.
kvcache::KvGeometry kv_geometry(const ModelConfig& config);

}  // namespace fp4::model
