// The weights of one model of the family, loaded from a checkpoint and held as FP32 on the
// host: the CPU backend's working format, whatever the checkpoint stores (NVFP4 and MXFP8
// tensors are dequantized exactly on load). Names follow the Hugging Face layout of
// docs/model.md, with or without the `language_model.` prefix of multimodal checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"

namespace fp4::model {

struct LinearWeight {
  std::vector<float> w;  // [out, in]
  int64_t out = 0, in = 0;
  std::string format;    // as stored: bf16, nvfp4, ... (for logs)
};

struct MlpWeights {
  LinearWeight gate, up, down;
};

struct AttentionWeights {
  LinearWeight q, k, v, o;
  std::vector<float> q_norm, k_norm;  // [head_dim] when the model norms q and k
  // Calibrated KV-cache scales (`self_attn.k_scale`, `v_scale`, as vLLM reads them): the FP8
  // cache's per-layer scale, or the NVFP4 cache's global scale; 1 when the checkpoint has none.
  float k_scale = 1.0f, v_scale = 1.0f;
  // MSA layers only.
  LinearWeight index_q, index_k;
  std::vector<float> index_q_norm, index_k_norm;  // [index_head_dim]
};

// One projection of every routed expert kept in NVFP4 as the checkpoint stores it, stacked over
// the experts in ExpertGemmParams' layout.
struct Nvfp4Experts {
  std::vector<uint8_t> values;       // [experts, n, k / 2]
  std::vector<uint8_t> scales;       // [experts, n, k / 16] E4M3
  std::vector<float> global_scales;  // [experts]
  int64_t n = 0, k = 0;
};

// Whether routed experts of this width run as the grouped W4A16 matmul: its GPU kernel tiles n
// by 64 and k by 128, for gate and up ([inter, hidden]) and down ([hidden, inter]). Every
// backend applies the same rule, so a model computes the same function everywhere.
constexpr bool w4a16_expert_shapes(int64_t hidden, int64_t inter) {
  return hidden > 0 && inter > 0 && hidden % 128 == 0 && inter % 128 == 0;
}

struct MoeWeights {
  LinearWeight router;           // [experts, hidden], FP32 in the checkpoint
  std::vector<float> bias;       // [experts] selection bias, empty when unused
  // When the checkpoint stores every routed expert's projections in NVFP4 and their shapes
  // pass w4a16_expert_shapes, they stay NVFP4 (gate, up, down below) and `experts` is empty:
  // the experts run as the grouped W4A16 matmul, activations rounded to BF16, on every backend.
  // Otherwise `experts` holds them in FP32.
  bool nvfp4 = false;
  Nvfp4Experts gate, up, down;
  std::vector<MlpWeights> experts;
  bool has_shared = false;
  MlpWeights shared;
};

struct LayerWeights {
  bool sparse = false;
  bool moe = false;
  std::vector<float> input_norm, post_attention_norm;  // [hidden]
  AttentionWeights attn;
  MlpWeights mlp;  // dense layers
  MoeWeights moe_weights;
};

struct ModelWeights {
  LinearWeight embed;      // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;
  LinearWeight lm_head;    // empty when tied to the embedding
  const LinearWeight& output() const { return lm_head.w.empty() ? embed : lm_head; }
};

// Loads and checks every tensor the config implies; a missing or mis-shaped tensor throws
// fp4::Error naming it and the expected shape.
ModelWeights load_model_weights(const Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace fp4::model
