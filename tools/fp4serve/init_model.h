// `fp4serve init-model`: a small model of the MiniMax-M3.1-Flash architecture with random
// weights, generated deterministically from a seed, so that a fresh build has a model to serve
// without downloading anything. The directory is a complete Hugging Face checkpoint: config.json
// (marked as random with "fp4serve_init"), model.safetensors (BF16 attention and dense weights,
// ModelOpt NVFP4 routed experts), a byte-level BPE tokenizer with ChatML special tokens,
// generation_config.json and a README.md that says what it is.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace fp4::init_model {

// The shape of a random model. Field names follow config.json's text_config.
struct RandomModelPreset {
  std::string name;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // also the index heads: MSA pairs one index head with each KV head
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;
  int64_t index_head_dim = 0;
  int64_t dense_layers = 0;  // the first layers have a dense MLP, the rest are MoE
  int64_t dense_intermediate_size = 0;
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t expert_intermediate_size = 0;
  int64_t shared_intermediate_size = 0;
  int64_t max_position_embeddings = 0;
};

// The preset names init-model accepts, and one of them by name (fp4::Error listing the known
// names otherwise).
std::vector<std::string> preset_names();
const RandomModelPreset& find_preset(std::string_view name);

// The tokenizer every preset shares: one token per byte (id = byte value, spelt in GPT-2's
// byte-to-character map), then a merge of a space with each ASCII letter, then the ChatML
// special tokens.
struct TokenIds {
  int32_t endoftext = 0;  // <|endoftext|>: beginning of sequence and padding
  int32_t im_start = 0;   // <|im_start|>
  int32_t im_end = 0;     // <|im_end|>: end of a chat turn, the end-of-sequence token
  int32_t vocab_size = 0;
};
TokenIds token_ids();
nlohmann::ordered_json tokenizer_json();
nlohmann::ordered_json tokenizer_config_json(const RandomModelPreset& preset);
nlohmann::ordered_json generation_config_json();

// How each stored tensor of the checkpoint is initialized and stored.
enum class Storage { kBf16, kF32, kNvfp4 };
// Norm weights are zeros: the family's Gemma norms multiply by 1 + w.
enum class Init { kNormal, kZeros };
struct TensorSpec {
  std::string name;             // the weight's full name, "language_model." prefix included
  std::vector<int64_t> shape;   // logical [rows, cols] or [n]
  Storage storage = Storage::kBf16;
  Init init = Init::kNormal;
  double std = 0;               // of kNormal
};
// Every weight of the model, in name order.
std::vector<TensorSpec> tensor_specs(const RandomModelPreset& preset);

// config.json: the family's text_config shrunk to the preset, the quantization_config of the
// stored formats, and "fp4serve_init" = {kind: random, seed, preset}.
nlohmann::ordered_json config_json(const RandomModelPreset& preset, uint64_t seed,
                                   const nlohmann::ordered_json& quantization_config);

// README.md of the directory: what the model is (random, from which seed), its architecture
// and the stored layout of each kind of tensor.
std::string readme_text(const RandomModelPreset& preset, uint64_t seed, int64_t parameters,
                        int64_t safetensors_bytes);

struct InitModelOptions {
  std::string out;
  std::string preset = "tiny-m3.1-flash";
  uint64_t seed = 0;
  bool force = false;  // write into a non-empty directory, replacing files of the same names
};

struct InitModelReport {
  std::string out;
  int64_t tensors = 0;
  int64_t parameters = 0;
  int64_t safetensors_bytes = 0;
};

// Writes the model directory. Every file is written atomically, config.json last, so a run
// that stops half-way never leaves a directory that loads as a model. Throws fp4::Error naming
// the directory or file at fault.
InitModelReport write_random_model(const InitModelOptions& options);

}  // namespace fp4::init_model
