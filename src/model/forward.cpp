#include "model/forward.h"

#include <cmath>
#include <cstring>

#include "core/check.h"

namespace fp4::model {
namespace {

PagedContext paged_context(const StepBatch& b) {
  PagedContext c;
  c.positions = b.positions.data();
  c.seq_of_token = b.seq_of_token.data();
  c.block_tables = b.block_tables.data();
  c.tokens = static_cast<int64_t>(b.tokens.size());
  c.num_seqs = b.num_seqs;
  c.max_blocks = b.max_blocks;
  return c;
}

void check_batch(const StepBatch& b, const ModelConfig& c, int64_t num_pages) {
  const size_t t = b.tokens.size();
  FP4_CHECK(t > 0 && b.positions.size() == t && b.seq_of_token.size() == t,
            "step batch: {} tokens with {} positions and {} sequence indices", t,
            b.positions.size(), b.seq_of_token.size());
  FP4_CHECK(static_cast<int64_t>(b.block_tables.size()) == b.num_seqs * b.max_blocks,
            "step batch: block tables hold {} entries, expected {} x {}", b.block_tables.size(),
            b.num_seqs, b.max_blocks);
  for (size_t i = 0; i < t; ++i) {
    FP4_CHECK(b.tokens[i] >= 0 && b.tokens[i] < c.vocab_size, "token id {} is outside the "
              "vocabulary of {}", b.tokens[i], c.vocab_size);
    FP4_CHECK(b.seq_of_token[i] >= 0 && b.seq_of_token[i] < b.num_seqs && b.positions[i] >= 0,
              "step batch: token {} has sequence {} and position {}", i, b.seq_of_token[i],
              b.positions[i]);
    const int64_t block = b.positions[i] / kvcache::kPageTokens;
    FP4_CHECK(block < b.max_blocks, "step batch: position {} needs block {}, beyond the block "
              "table's {}", b.positions[i], block, b.max_blocks);
    const int32_t page = b.block_tables[b.seq_of_token[i] * b.max_blocks + block];
    FP4_CHECK(page >= 0 && page < num_pages, "step batch: position {} maps to page {}, outside "
              "the {} pages", b.positions[i], page, num_pages);
  }
  for (int32_t r : b.logit_rows) {
    FP4_CHECK(r >= 0 && static_cast<size_t>(r) < t, "logit row {} is outside the {} tokens", r, t);
  }
}

}  // namespace

ModelRunner::ModelRunner(const ModelConfig& config, const ModelWeights& weights, Backend& backend,
                         KvMemory& cache)
    : config_(config), weights_(weights), backend_(backend), cache_(cache) {}

std::vector<float> ModelRunner::linear(const LinearWeight& w, const float* x, int64_t rows) {
  std::vector<float> y(static_cast<size_t>(rows * w.out));
  backend_.linear({.x = x, .w = w.w.data(), .y = y.data(), .m = rows, .n = w.out, .k = w.in});
  return y;
}

void ModelRunner::mlp(const MlpWeights& w, const float* x, int64_t rows, float* out) {
  const std::vector<float> gate = linear(w.gate, x, rows);
  const std::vector<float> up = linear(w.up, x, rows);
  std::vector<float> act(gate.size());
  const bool oai = config_.activation == ModelConfig::Activation::kSwigluOai;
  backend_.gated_activation({.gate = gate.data(), .up = up.data(), .out = act.data(), .m = rows,
                             .inter = w.gate.out, .stride = w.gate.out,
                             .kind = oai ? GatedActivation::kSwigluOai : GatedActivation::kSilu,
                             .alpha = config_.swiglu_alpha, .limit = config_.swiglu_limit,
                             .beta = config_.swiglu_beta});
  backend_.linear({.x = act.data(), .w = w.down.w.data(), .y = out, .m = rows, .n = w.down.out,
                   .k = w.down.in});
}

void ModelRunner::moe(const MoeWeights& w, const std::vector<float>& x, int64_t rows,
                      std::vector<float>& out) {
  const int64_t h = config_.hidden_size, k = config_.num_experts_per_tok;
  const std::vector<float> logits = linear(w.router, x.data(), rows);
  std::vector<int32_t> ids(static_cast<size_t>(rows * k));
  std::vector<float> weights(ids.size());
  backend_.router({.logits = logits.data(), .bias = w.bias.empty() ? nullptr : w.bias.data(),
                   .tokens = rows, .experts = config_.num_experts, .top_k = k,
                   .expert_ids = ids.data(), .weights = weights.data()});
  // Group the (token, slot) pairs by expert so each expert runs once on all its tokens.
  const int64_t pairs = rows * k, experts = config_.num_experts;
  std::vector<int32_t> offsets(static_cast<size_t>(experts + 1)), pair_of_row(pairs), row_of_pair(pairs);
  backend_.moe_dispatch({.expert_ids = ids.data(), .tokens = rows, .top_k = k, .experts = experts,
                         .row_offsets = offsets.data(), .pair_of_row = pair_of_row.data(),
                         .row_of_pair = row_of_pair.data()});
  std::vector<float> y(static_cast<size_t>(pairs * h));
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[e], n = offsets[e + 1] - first;
    if (n == 0) continue;
    std::vector<float> in(static_cast<size_t>(n * h));
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(&in[r * h], &x[pair_of_row[first + r] / k * h], sizeof(float) * h);
    }
    mlp(w.experts[e], in.data(), n, &y[first * h]);
  }
  out.assign(static_cast<size_t>(rows * h), 0.0f);
  if (w.has_shared) mlp(w.shared, x.data(), rows, out.data());
  backend_.moe_combine({.y_grouped = y.data(), .row_of_pair = row_of_pair.data(), .expert_ids = ids.data(),
                        .weights = weights.data(), .shared = w.has_shared ? out.data() : nullptr,
                        .routed_scale = config_.routed_scaling_factor, .out = out.data(), .tokens = rows,
                        .top_k = k, .hidden = h});
}

void ModelRunner::attention(int64_t layer_index, const StepBatch& b,
                            const std::vector<float>& x, std::vector<float>& out) {
  const LayerWeights& layer = weights_.layers[layer_index];
  const AttentionWeights& w = layer.attn;
  LayerCache& cache = cache_.layer(layer_index);
  const ModelConfig& c = config_;
  const int64_t t = static_cast<int64_t>(b.tokens.size());
  const float eps = static_cast<float>(c.rms_norm_eps);

  const std::vector<float> q_proj = linear(w.q, x.data(), t);
  const std::vector<float> k = linear(w.k, x.data(), t);
  const std::vector<float> v = linear(w.v, x.data(), t);
  const PagedContext ctx = paged_context(b);
  std::vector<float> q(q_proj.size()), iq, ik;
  auto norm_weight = [](const std::vector<float>& weight) { return weight.empty() ? nullptr : weight.data(); };
  PreAttentionParams pre{
      .ctx = ctx,
      .q = {q_proj.data(), c.num_heads * c.head_dim, norm_weight(w.q_norm)},
      .k = {k.data(), c.num_kv_heads * c.head_dim, norm_weight(w.k_norm)},
      .v = {v.data(), c.num_kv_heads * c.head_dim, nullptr},
      .q_heads = c.num_heads, .kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
      .index_q = {}, .index_k = {}, .eps = eps, .gemma = c.gemma_norm, .rotary_dim = c.rotary_dim,
      .theta = c.rope_theta,
      .kv_layout = &cache.kv, .kv_pool = cache.kv_pages.data(), .kv_scales = cache.kv_scales,
      .num_pages = cache_.num_pages(), .q_out = q.data()};
  std::vector<float> iq_out;
  if (layer.sparse) {
    const int64_t di = c.index_head_dim;
    iq = linear(w.index_q, x.data(), t);
    ik = linear(w.index_k, x.data(), t);
    iq_out.resize(iq.size());
    pre.index_q = {iq.data(), c.num_index_heads * di, norm_weight(w.index_q_norm)};
    pre.index_k = {ik.data(), di, norm_weight(w.index_k_norm)};
    pre.index_heads = c.num_index_heads;
    pre.index_head_dim = di;
    pre.index_layout = &cache.index;
    pre.index_pool = cache.index_pages.data();
    pre.index_scale = cache.index_scale;
    pre.index_q_out = iq_out.data();
  }
  backend_.pre_attention(pre);

  std::vector<int32_t>* selected = nullptr;
  if (layer.sparse) {
    selected = &selection_[layer_index];
    selected->assign(static_cast<size_t>(c.num_kv_heads * t * c.sparse_topk_blocks), -1);
    backend_.indexer_topk({.ctx = ctx, .layout = &cache.index, .pool = cache.index_pages.data(),
                           .num_pages = cache_.num_pages(), .scale = cache.index_scale,
                           .index_q = iq_out.data(), .heads = c.num_index_heads, .head_dim = c.index_head_dim,
                           .topk = c.sparse_topk_blocks, .init_blocks = c.sparse_init_blocks,
                           .local_blocks = c.sparse_local_blocks, .selected = selected->data()});
  }
  std::vector<float> attn(static_cast<size_t>(t * c.num_heads * c.head_dim));
  backend_.paged_attention({.ctx = ctx, .layout = &cache.kv, .pool = cache.kv_pages.data(),
                            .num_pages = cache_.num_pages(), .scales = cache.kv_scales,
                            .q = q.data(), .out = attn.data(), .q_heads = c.num_heads,
                            .kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
                            .softmax_scale = static_cast<float>(1.0 / std::sqrt(double(c.head_dim))),
                            .selected = selected != nullptr ? selected->data() : nullptr,
                            .topk = selected != nullptr ? c.sparse_topk_blocks : 0});
  out = linear(w.o, attn.data(), t);
}

std::vector<float> ModelRunner::forward(const StepBatch& b) {
  const ModelConfig& c = config_;
  check_batch(b, c, cache_.num_pages());
  const int64_t t = static_cast<int64_t>(b.tokens.size()), h = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  selection_.assign(static_cast<size_t>(c.num_layers), {});

  std::vector<float> x(static_cast<size_t>(t * h));
  for (int64_t i = 0; i < t; ++i) {
    std::memcpy(&x[i * h], &weights_.embed.w[int64_t{b.tokens[i]} * h], sizeof(float) * h);
  }
  std::vector<float> normed(x.size()), delta;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& layer = weights_.layers[l];
    backend_.rms_norm({.x = x.data(), .weight = layer.input_norm.data(), .y = normed.data(),
                       .rows = t, .dim = h, .eps = eps, .gemma = c.gemma_norm});
    attention(l, b, normed, delta);
    for (size_t j = 0; j < x.size(); ++j) x[j] += delta[j];
    backend_.rms_norm({.x = x.data(), .weight = layer.post_attention_norm.data(),
                       .y = normed.data(), .rows = t, .dim = h, .eps = eps, .gemma = c.gemma_norm});
    if (layer.moe) {
      moe(layer.moe_weights, normed, t, delta);
    } else {
      delta.assign(x.size(), 0.0f);
      mlp(layer.mlp, normed.data(), t, delta.data());
    }
    for (size_t j = 0; j < x.size(); ++j) x[j] += delta[j];
  }
  // Only the rows whose next token is wanted reach the final norm and the vocabulary projection.
  const int64_t rows = static_cast<int64_t>(b.logit_rows.size());
  std::vector<float> last(static_cast<size_t>(rows * h));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(&last[r * h], &x[int64_t{b.logit_rows[r]} * h], sizeof(float) * h);
  }
  backend_.rms_norm({.x = last.data(), .weight = weights_.final_norm.data(), .y = last.data(),
                     .rows = rows, .dim = h, .eps = eps, .gemma = c.gemma_norm});
  return linear(weights_.output(), last.data(), rows);
}

}  // namespace fp4::model
