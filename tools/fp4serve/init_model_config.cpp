// config.json and README.md of the random model: the MiniMax-M3.1-Flash text_config (presets/
// minimax-m3.1-flash/config.json) with the sizes of the preset.
#include <fmt/format.h>

#include "tools/fp4serve/init_model.h"

namespace fp4::init_model {
namespace {

using nlohmann::ordered_json;

ordered_json per_layer(int64_t layers, int64_t zeros_first) {
  ordered_json flags = ordered_json::array();
  for (int64_t i = 0; i < layers; ++i) flags.push_back(i < zeros_first ? 0 : 1);
  return flags;
}

// Both the sequence and the chat turn end generation; generation_config says the same.
ordered_json eos_ids() {
  const TokenIds ids = token_ids();
  return ordered_json::array({ids.im_end, ids.endoftext});
}

}  // namespace

ordered_json config_json(const RandomModelPreset& p, uint64_t seed,
                         const ordered_json& quantization_config) {
  const TokenIds ids = token_ids();
  // The family's fixed choices: page-sized MSA blocks, top-16 block selection with the local
  // block forced, max block scores, Gemma norms, per-head QK norm, SwiGLU-OAI, sigmoid routing
  // with a selection bias and the routed output scaled by 2.
  const ordered_json sparse = {
      {"use_sparse_attention", true},
      {"sparse_index_dim", p.index_head_dim},
      {"sparse_num_index_heads", p.num_kv_heads},
      {"sparse_topk_blocks", 16},
      {"sparse_block_size", 128},
      {"sparse_score_type", "max"},
      {"sparse_init_block", 0},
      {"sparse_local_block", 1},
      {"sparse_attention_freq", per_layer(p.num_layers, 0)},
      {"sparse_disable_index_value", per_layer(p.num_layers, 0)}};
  const ordered_json text = {
      {"hidden_size", p.hidden_size},
      {"num_hidden_layers", p.num_layers},
      {"num_attention_heads", p.num_heads},
      {"num_key_value_heads", p.num_kv_heads},
      {"head_dim", p.head_dim},
      {"vocab_size", ids.vocab_size},
      {"tie_word_embeddings", false},
      {"max_position_embeddings", p.max_position_embeddings},
      {"rms_norm_eps", 1e-6},
      {"use_gemma_norm", true},
      {"use_qk_norm", true},
      {"qk_norm_type", "per_head"},
      {"rope_theta", 5000000},
      {"rotary_dim", p.rotary_dim},
      {"partial_rotary_factor", static_cast<double>(p.rotary_dim) / static_cast<double>(p.head_dim)},
      {"attention_output_gate", false},
      {"hidden_act", "swigluoai"},
      {"swiglu_alpha", 1.702},
      {"swiglu_limit", 7.0},
      {"swiglu_beta", 1.0},
      {"moe_layer_freq", per_layer(p.num_layers, p.dense_layers)},
      {"dense_intermediate_size", p.dense_intermediate_size},
      {"intermediate_size", p.expert_intermediate_size},
      {"shared_intermediate_size", p.shared_intermediate_size},
      {"n_shared_experts", 1},
      {"num_local_experts", p.num_experts},
      {"num_experts_per_tok", p.num_experts_per_tok},
      {"scoring_func", "sigmoid"},
      {"use_routing_bias", true},
      {"routed_scaling_factor", 2.0},
      {"bos_token_id", ids.endoftext},
      {"eos_token_id", eos_ids()},
      {"sparse_attention_config", sparse}};
  return {{"architectures", ordered_json::array({"MiniMaxM3SparseForConditionalGeneration"})},
          {"model_type", "minimax_m3_vl"},
          {"text_config", text},
          {"tie_word_embeddings", false},
          {"bos_token_id", ids.endoftext},
          {"eos_token_id", eos_ids()},
          {"torch_dtype", "bfloat16"},
          {"quantization_config", quantization_config},
          {"fp4serve_init", {{"kind", "random"}, {"seed", seed}, {"preset", p.name}}}};
}

ordered_json generation_config_json() {
  return {{"bos_token_id", token_ids().endoftext}, {"eos_token_id", eos_ids()}};
}

std::string readme_text(const RandomModelPreset& p, uint64_t seed, int64_t parameters,
                        int64_t safetensors_bytes) {
  const TokenIds ids = token_ids();
  const int64_t h = p.hidden_size, e = p.num_experts, i = p.expert_intermediate_size;
  return fmt::format(
      R"(# {preset}: random weights (seed {seed})

This directory is fp4serve's built-in model. Its weights are **random**: drawn by
`fp4serve init-model --preset {preset} --seed {seed}` from a fixed seed, not trained, so
everything it generates is noise. It exists so that `fp4serve serve` without `--model` has a
model of the right architecture to serve on a fresh machine, with nothing to download. The same
seed gives the same bytes on every machine.

## Architecture

MiniMax-M3.1-Flash (`MiniMaxM3SparseForConditionalGeneration`, text model only), shrunk:

| | this model | MiniMax-M3.1-Flash |
|---|---|---|
| layers | {layers} ({dense} dense MLP, {moe} MoE), MSA sparse attention in all | 60 (3 dense, 57 MoE), MSA in all |
| hidden size | {h} | 6144 |
| attention | {heads} query heads, {kv} KV heads of {d}, RoPE on the first {rot} dims | 64 query, 4 KV heads of 128, RoPE on 64 |
| MSA index branch | {kv} index query heads and 1 index key head of {di}; 128-token blocks, top 16 (the local block forced), max block scores | the same with dims of 128 |
| MoE | {e} routed experts of {i}, top {k}, sigmoid routing with a selection bias, routed output x2, one shared expert of {is} | 128 experts of 3072, top 4, shared 3072 |
| dense MLP | {dense_i} | 12288 |
| norms, activation | Gemma RMSNorm (x (1 + w)), per-head QK norm, SwiGLU-OAI (alpha 1.702, limit 7) | the same |
| vocabulary | {vocab} tokens (byte-level BPE) | 200064 |
| context | {ctx} positions | 1,048,576 |

Attention is exact (dense) up to 16 blocks x 128 = 2048 tokens of context and block-sparse
beyond.

## Files

- `model.safetensors` ({bytes} bytes, {params} parameters). Tensor names are those of the real
  checkpoints, under `language_model.`. Attention, index, dense MLP, shared expert, embedding and
  LM head weights are BF16; the router `block_sparse_moe.gate` and `e_score_correction_bias` are
  F32; norm weights are BF16 zeros (Gemma norms multiply by 1 + w). Each routed expert matrix
  (`experts.<e>.w1`, `w3` of [{i}, {h}], `w2` of [{h}, {i}]) is ModelOpt NVFP4:
  - `weight`: U8 [rows, cols / 2], two E2M1 values per byte, the even column in the low nibble;
  - `weight_scale`: F8_E4M3 [rows, cols / 16], one scale per 16 values along a row;
  - `weight_scale_2`: F32 [], the tensor's global scale (amax / (6 x 448));
  - `input_scale`: F32 [], 1 (no activation calibration).
- `config.json`: `text_config` as the family spells it, `quantization_config` (ModelOpt NVFP4,
  group 16, the BF16/F32 modules excluded), and `fp4serve_init` saying the weights are random.
- `hf_quant_config.json`: the same quantization metadata, where ModelOpt writes it.
- `tokenizer.json`: byte-level BPE. Ids 0-255 are the bytes (GPT-2's byte-to-character map),
  256-{last_merge} merge a space with an ASCII letter, then the special tokens `<|endoftext|>` ({eot}),
  `<|im_start|>` ({ims}) and `<|im_end|>` ({ime}).
- `tokenizer_config.json`: BOS `<|endoftext|>`, EOS `<|im_end|>`, and a ChatML chat template.
- `generation_config.json`: the BOS and EOS ids.

Initialization: every weight matrix and the embedding are normal with standard deviation 0.02
(a sum of 12 uniforms from a SplitMix64 stream per tensor, seeded by the seed and the tensor's
name), the selection bias normal with standard deviation 0.01.
)",
      fmt::arg("preset", p.name), fmt::arg("seed", seed), fmt::arg("layers", p.num_layers),
      fmt::arg("dense", p.dense_layers), fmt::arg("moe", p.num_layers - p.dense_layers),
      fmt::arg("h", h), fmt::arg("heads", p.num_heads), fmt::arg("kv", p.num_kv_heads),
      fmt::arg("d", p.head_dim), fmt::arg("rot", p.rotary_dim), fmt::arg("di", p.index_head_dim),
      fmt::arg("e", e), fmt::arg("i", i), fmt::arg("k", p.num_experts_per_tok),
      fmt::arg("is", p.shared_intermediate_size), fmt::arg("dense_i", p.dense_intermediate_size),
      fmt::arg("vocab", ids.vocab_size), fmt::arg("ctx", p.max_position_embeddings),
      fmt::arg("bytes", safetensors_bytes), fmt::arg("params", parameters),
      fmt::arg("last_merge", ids.endoftext - 1), fmt::arg("eot", ids.endoftext),
      fmt::arg("ims", ids.im_start), fmt::arg("ime", ids.im_end));
}

}  // namespace fp4::init_model
