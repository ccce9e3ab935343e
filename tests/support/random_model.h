// A small random model of the M3 family built in memory (dense and MSA attention, dense MLP
// and MoE layers), for the engine tests: no checkpoint, any page format.
#pragma once

#include <cmath>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "engine/loaded_model.h"
#include "tests/support/random.h"

namespace fp4::testing {

inline model::ModelConfig tiny_m3_config() {
  model::ModelConfig c;
  c.source = "tiny-m3";
  c.hidden_size = 64;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 97;
  c.qk_norm = true;
  c.gemma_norm = true;
  c.rope_theta = 5e6;
  c.rotary_dim = 8;
  c.activation = model::ModelConfig::Activation::kSwigluOai;
  c.moe_layer = {false, true, true};
  c.dense_intermediate_size = 96;
  c.moe_intermediate_size = 32;
  c.shared_intermediate_size = 32;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.routing_bias = true;
  c.routed_scaling_factor = 2.0f;
  c.sparse_layer = {false, true, true};
  c.index_head_dim = 16;
  c.num_index_heads = 2;
  c.sparse_block_size = 128;
  c.sparse_topk_blocks = 4;  // so that 4 x 128 = 512 tokens already drop blocks
  c.sparse_local_blocks = 1;
  c.max_position_embeddings = 8192;
  return c;
}

inline model::LinearWeight random_linear(int64_t out, int64_t in, std::mt19937_64& rng) {
  model::LinearWeight l;
  l.out = out;
  l.in = in;
  l.w = random_floats(out * in, Distribution::kGaussian, rng);
  for (float& x : l.w) x /= std::sqrt(static_cast<float>(in));
  return l;
}

inline std::vector<float> random_norm(int64_t n, std::mt19937_64& rng) {
  auto v = random_floats(n, Distribution::kGaussian, rng);
  for (float& x : v) x *= 0.1f;
  return v;
}

inline model::MlpWeights random_mlp(int64_t hidden, int64_t inter, std::mt19937_64& rng) {
  return {random_linear(inter, hidden, rng), random_linear(inter, hidden, rng),
          random_linear(hidden, inter, rng)};
}

inline engine::LoadedModel random_model(const model::ModelConfig& c, std::mt19937_64& rng) {
  engine::LoadedModel m;
  m.config = c;
  const int64_t h = c.hidden_size, d = c.head_dim;
  m.weights.embed = random_linear(c.vocab_size, h, rng);
  for (auto& x : m.weights.embed.w) x *= std::sqrt(static_cast<float>(h));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    model::LayerWeights l;
    l.sparse = c.sparse_layer[i];
    l.moe = c.moe_layer[i];
    l.input_norm = random_norm(h, rng);
    l.post_attention_norm = random_norm(h, rng);
    l.attn.q = random_linear(c.num_heads * d, h, rng);
    l.attn.k = random_linear(c.num_kv_heads * d, h, rng);
    l.attn.v = random_linear(c.num_kv_heads * d, h, rng);
    l.attn.o = random_linear(h, c.num_heads * d, rng);
    l.attn.q_norm = random_norm(d, rng);
    l.attn.k_norm = random_norm(d, rng);
    if (l.sparse) {
      l.attn.index_q = random_linear(c.num_index_heads * c.index_head_dim, h, rng);
      l.attn.index_k = random_linear(c.index_head_dim, h, rng);
      l.attn.index_q_norm = random_norm(c.index_head_dim, rng);
      l.attn.index_k_norm = random_norm(c.index_head_dim, rng);
    }
    if (l.moe) {
      l.moe_weights.router = random_linear(c.num_experts, h, rng);
      l.moe_weights.bias = random_norm(c.num_experts, rng);
      for (int64_t e = 0; e < c.num_experts; ++e) {
        l.moe_weights.experts.push_back(random_mlp(h, c.moe_intermediate_size, rng));
      }
      l.moe_weights.has_shared = true;
      l.moe_weights.shared = random_mlp(h, c.shared_intermediate_size, rng);
    } else {
      l.mlp = random_mlp(h, c.dense_intermediate_size, rng);
    }
    m.weights.layers.push_back(std::move(l));
  }
  m.weights.final_norm = random_norm(h, rng);
  m.weights.lm_head = random_linear(c.vocab_size, h, rng);
  m.backend = std::make_unique<cpu::CpuBackend>();
  m.resident = std::make_unique<model::ResidentWeights>(m.weights, *m.backend);
  return m;
}

// A copy of `m` (config and weights) placed on `backend`: the same model on a second backend.
inline engine::LoadedModel same_model_on(const engine::LoadedModel& m, std::unique_ptr<Backend> backend) {
  engine::LoadedModel copy;
  copy.config = m.config;
  copy.weights = m.weights;
  copy.backend = std::move(backend);
  copy.resident = std::make_unique<model::ResidentWeights>(copy.weights, *copy.backend);
  return copy;
}

inline std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> p(n);
  for (auto& t : p) t = d(rng);
  return p;
}

}  // namespace fp4::testing
