#include "model/forward.h"

#include <cmath>
#include <cstring>
#include <span>

#include "core/check.h"

namespace fp4::model {
namespace {

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

ModelRunner::ModelRunner(const ModelConfig& config, const ModelWeights& weights,
                         const ResidentWeights& resident, Backend& backend, KvMemory& cache)
    : config_(config), weights_(weights), backend_(backend), cache_(cache), resident_(resident) {
  graph_safe_ = backend.supports_capture();
  for (const LayerWeights& l : weights.layers) graph_safe_ = graph_safe_ && !(l.moe && !l.moe_weights.nvfp4);
}

ModelRunner::Step ModelRunner::upload(const StepBatch& b) {
  Step s{.tokens = Buffer<int32_t>(backend_, b.tokens),
         .positions = Buffer<int32_t>(backend_, b.positions),
         .seq_of_token = Buffer<int32_t>(backend_, b.seq_of_token),
         .block_tables = Buffer<int32_t>(backend_, b.block_tables),
         .logit_rows = Buffer<int32_t>(backend_, b.logit_rows),
         .ctx = {}};
  s.ctx = {.positions = s.positions.data(), .seq_of_token = s.seq_of_token.data(),
           .block_tables = s.block_tables.data(), .tokens = static_cast<int64_t>(b.tokens.size()),
           .num_seqs = b.num_seqs, .max_blocks = b.max_blocks};
  return s;
}

LinearParams ModelRunner::linear_params(const LinearWeight& w, const float* x, int64_t rows, float* y) {
  const ResidentWeights::Linear placed = resident_(w);
  return {.x = x, .w = placed.w, .y = y, .m = rows, .n = w.out, .k = w.in, .w_bf16 = placed.w_bf16,
          .w_e4m3 = placed.w_e4m3, .w_scales = placed.w_scales};
}

void ModelRunner::linear(const LinearWeight& w, const float* x, int64_t rows, float* y) {
  backend_.linear(linear_params(w, x, rows, y));
}

void ModelRunner::mlp(const MlpWeights& w, const float* x, int64_t rows, float* out) {
  const int64_t inter = w.gate.out;
  Buffer<float> gate = floats(rows * inter), up = floats(rows * inter), act = floats(rows * inter);
  const LinearParams gate_up[] = {linear_params(w.gate, x, rows, gate.data()), linear_params(w.up, x, rows, up.data())};
  backend_.linears(gate_up);
  const bool oai = config_.activation == ModelConfig::Activation::kSwigluOai;
  backend_.gated_activation({.gate = gate.data(), .up = up.data(), .out = act.data(), .m = rows,
                             .inter = inter, .stride = inter,
                             .kind = oai ? GatedActivation::kSwigluOai : GatedActivation::kSilu,
                             .alpha = config_.swiglu_alpha, .limit = config_.swiglu_limit,
                             .beta = config_.swiglu_beta});
  linear(w.down, act.data(), rows, out);
}

void ModelRunner::moe(const MoeWeights& w, const float* x, int64_t rows, float* out,
                      Buffer<int32_t>* kept_routes, const std::vector<int32_t>& forced_routes) {
  const int64_t h = config_.hidden_size, k = config_.num_experts_per_tok;
  const int64_t pairs = rows * k, experts = config_.num_experts;
  Buffer<float> logits = floats(rows * experts), weights = floats(pairs);
  linear(w.router, x, rows, logits.data());
  Buffer<int32_t> ids(backend_, static_cast<size_t>(pairs));
  Buffer<int32_t> forced;
  if (!forced_routes.empty()) {
    FP4_CHECK(static_cast<int64_t>(forced_routes.size()) == pairs,
              "forced routing holds {} expert ids, not tokens {} x top_k {}", forced_routes.size(), rows, k);
    forced = Buffer<int32_t>(backend_, forced_routes);
  }
  backend_.router({.logits = logits.data(), .bias = resident_(w.bias), .tokens = rows,
                   .experts = experts, .top_k = k, .expert_ids = ids.data(),
                   .weights = weights.data(), .forced_ids = forced.data()});
  // Group the (token, slot) pairs by expert so each expert runs once on all its tokens.
  Buffer<int32_t> offsets(backend_, static_cast<size_t>(experts + 1));
  Buffer<int32_t> pair_of_row(backend_, static_cast<size_t>(pairs));
  Buffer<int32_t> row_of_pair(backend_, static_cast<size_t>(pairs));
  backend_.moe_dispatch({.expert_ids = ids.data(), .tokens = rows, .top_k = k, .experts = experts,
                         .row_offsets = offsets.data(), .pair_of_row = pair_of_row.data(),
                         .row_of_pair = row_of_pair.data()});
  Buffer<float> y = floats(pairs * h);
  if (w.nvfp4) {
    routed_nvfp4(w, x, rows, offsets, pair_of_row, y);
  } else {
    routed_f32(w, x, rows, offsets, pair_of_row, y);
  }
  if (w.has_shared) mlp(w.shared, x, rows, out);
  backend_.moe_combine({.y_grouped = y.data(), .row_of_pair = row_of_pair.data(),
                        .expert_ids = ids.data(), .weights = weights.data(),
                        .shared = w.has_shared ? out : nullptr,
                        .routed_scale = config_.routed_scaling_factor, .out = out, .tokens = rows,
                        .top_k = k, .hidden = h});
  if (kept_routes != nullptr) *kept_routes = std::move(ids);
}

// W4A16: the grouped rows' inputs in BF16, gate and up over all experts at once, the activation
// back to BF16, then down. The grids depend on shapes only; nothing waits for the device.
void ModelRunner::routed_nvfp4(const MoeWeights& w, const float* x, int64_t rows,
                               const Buffer<int32_t>& offsets, const Buffer<int32_t>& pair_of_row,
                               Buffer<float>& y) {
  const int64_t h = config_.hidden_size, k = config_.num_experts_per_tok, pairs = rows * k;
  const int64_t inter = w.gate.n, experts = config_.num_experts;
  Buffer<uint16_t> xg(backend_, static_cast<size_t>(pairs * h)), act(backend_, static_cast<size_t>(pairs * inter));
  backend_.moe_gather({.x = x, .pair_of_row = pair_of_row.data(), .rows = pairs, .top_k = k, .hidden = h,
                       .x_grouped = xg.data()});
  auto matmul = [&](const Nvfp4Experts& s, const uint16_t* in, float* out) {
    backend_.expert_gemm({.x = in, .row_offsets = offsets.data(), .values = resident_(s.values),
                          .scales = resident_(s.scales), .global_scales = resident_(s.global_scales),
                          .y = out, .rows = pairs, .experts = experts, .n = s.n, .k = s.k});
  };
  Buffer<float> gate = floats(pairs * inter), up = floats(pairs * inter);
  matmul(w.gate, xg.data(), gate.data());
  matmul(w.up, xg.data(), up.data());
  const bool oai = config_.activation == ModelConfig::Activation::kSwigluOai;
  backend_.gated_activation({.gate = gate.data(), .up = up.data(), .out = nullptr, .out_bf16 = act.data(),
                             .m = pairs, .inter = inter, .stride = inter,
                             .kind = oai ? GatedActivation::kSwigluOai : GatedActivation::kSilu,
                             .alpha = config_.swiglu_alpha, .limit = config_.swiglu_limit,
                             .beta = config_.swiglu_beta});
  matmul(w.down, act.data(), y.data());
}

// FP32 experts, one MLP per expert on its rows. The experts' row counts decide the matmuls'
// shapes, so they come back to the host (one wait per MoE layer on a GPU).
void ModelRunner::routed_f32(const MoeWeights& w, const float* x, int64_t rows,
                             const Buffer<int32_t>& offsets, const Buffer<int32_t>& pair_of_row,
                             Buffer<float>& y) {
  const int64_t h = config_.hidden_size, k = config_.num_experts_per_tok, pairs = rows * k;
  const std::vector<int32_t> first_row = offsets.download();
  std::vector<int32_t> token_of_row = pair_of_row.download();
  for (int32_t& r : token_of_row) r = static_cast<int32_t>(r / k);
  const Buffer<int32_t> token_rows(backend_, token_of_row);
  Buffer<float> in = floats(pairs * h);
  backend_.gather_rows({.table = x, .table_rows = rows, .dim = h, .ids = token_rows.data(),
                        .count = pairs, .out = in.data()});
  for (int64_t e = 0; e < config_.num_experts; ++e) {
    const int64_t first = first_row[e], n = first_row[e + 1] - first;
    if (n > 0) mlp(w.experts[e], in.data() + first * h, n, y.data() + first * h);
  }
}

void ModelRunner::attention(int64_t layer_index, const Step& step, const float* x, float* out,
                            bool keep_selection, const std::vector<int32_t>& forced_selection) {
  const LayerWeights& layer = weights_.layers[layer_index];
  const AttentionWeights& w = layer.attn;
  LayerCache& cache = cache_.layer(layer_index);
  const ModelConfig& c = config_;
  const int64_t t = step.ctx.tokens;

  // q is normed and rotated in place (its rows are dense).
  Buffer<float> q = floats(t * w.q.out), k = floats(t * w.k.out), v = floats(t * w.v.out);
  Buffer<float> iq, ik, iq_out;
  // The projections of x in one call: a backend may stream their weights in one launch.
  LinearParams projections[5] = {linear_params(w.q, x, t, q.data()), linear_params(w.k, x, t, k.data()),
                                 linear_params(w.v, x, t, v.data())};
  size_t count = 3;
  if (layer.sparse) {
    iq = floats(t * w.index_q.out);
    ik = floats(t * w.index_k.out);
    projections[count++] = linear_params(w.index_q, x, t, iq.data());
    projections[count++] = linear_params(w.index_k, x, t, ik.data());
  }
  backend_.linears(std::span<const LinearParams>(projections, count));
  PreAttentionParams pre{
      .ctx = step.ctx,
      .q = {q.data(), c.num_heads * c.head_dim, resident_(w.q_norm)},
      .k = {k.data(), c.num_kv_heads * c.head_dim, resident_(w.k_norm)},
      .v = {v.data(), c.num_kv_heads * c.head_dim, nullptr},
      .q_heads = c.num_heads, .kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
      .index_q = {}, .index_k = {}, .eps = static_cast<float>(c.rms_norm_eps),
      .gemma = c.gemma_norm, .rotary_dim = c.rotary_dim, .theta = c.rope_theta,
      .kv_layout = &cache.kv, .kv_pool = cache.kv_pages.data(), .kv_scales = cache.kv_scales,
      .num_pages = cache_.num_pages(), .q_out = q.data()};
  if (layer.sparse) {
    const int64_t di = c.index_head_dim;
    iq_out = floats(t * c.num_index_heads * di);
    pre.index_q = {iq.data(), c.num_index_heads * di, resident_(w.index_q_norm)};
    pre.index_k = {ik.data(), di, resident_(w.index_k_norm)};
    pre.index_heads = c.num_index_heads;
    pre.index_head_dim = di;
    pre.index_layout = &cache.index;
    pre.index_pool = cache.index_pages.data();
    pre.index_scale = cache.index_scale;
    pre.index_q_out = iq_out.data();
  }
  backend_.pre_attention(pre);

  // The selection lives until paged_attention has read it: in selection_ when it is kept,
  // else here, at function scope (freed at the end of the step's attention, stream-ordered).
  const int32_t* selected = nullptr;
  Buffer<int32_t> local_selection;
  if (layer.sparse) {
    Buffer<int32_t>& sel = keep_selection ? selection_[layer_index] : local_selection;
    const int64_t ids = c.num_kv_heads * t * c.sparse_topk_blocks;
    sel = Buffer<int32_t>(backend_, static_cast<size_t>(ids));
    if (!forced_selection.empty()) {
      // The index K is still cached above (pre_attention); only the choice is taken.
      FP4_CHECK(static_cast<int64_t>(forced_selection.size()) == ids,
                "layer {}: the forced selection holds {} block ids, not kv_heads {} x tokens {} x topk {}",
                layer_index, forced_selection.size(), c.num_kv_heads, t, c.sparse_topk_blocks);
      sel.upload(forced_selection);
    } else {
      backend_.indexer_topk({.ctx = step.ctx, .layout = &cache.index, .pool = cache.index_pages.data(),
                             .num_pages = cache_.num_pages(), .scale = cache.index_scale,
                             .index_q = iq_out.data(), .heads = c.num_index_heads,
                             .head_dim = c.index_head_dim, .topk = c.sparse_topk_blocks,
                             .init_blocks = c.sparse_init_blocks,
                             .local_blocks = c.sparse_local_blocks, .selected = sel.data(),
                             .query_format = cache_.formats().index_query});
    }
    selected = sel.data();
  }
  Buffer<float> attn = floats(t * c.num_heads * c.head_dim);
  backend_.paged_attention({.ctx = step.ctx, .layout = &cache.kv, .pool = cache.kv_pages.data(),
                            .num_pages = cache_.num_pages(), .scales = cache.kv_scales,
                            .q = q.data(), .out = attn.data(), .q_heads = c.num_heads,
                            .kv_heads = c.num_kv_heads, .head_dim = c.head_dim,
                            .softmax_scale = static_cast<float>(1.0 / std::sqrt(double(c.head_dim))),
                            .selected = selected,
                            .topk = selected != nullptr ? c.sparse_topk_blocks : 0,
                            .operands = cache_.formats().attention_operands});
  linear(w.o, attn.data(), t, out);
}

std::vector<float> ModelRunner::forward(const StepBatch& b, bool need_selection, const ForcedChoices* forced) {
  const float* logits = forward_on_device(b, need_selection, forced);
  std::vector<float> host(b.logit_rows.size() * static_cast<size_t>(config_.vocab_size));
  backend_.copy_to_host(host.data(), logits, host.size() * sizeof(float));
  return host;
}

const float* ModelRunner::forward_on_device(const StepBatch& b, bool need_selection, const ForcedChoices* forced) {
  check_batch(b, config_, cache_.num_pages());
  FP4_CHECK(forced == nullptr || (static_cast<int64_t>(forced->routes.size()) == config_.num_layers &&
                                  static_cast<int64_t>(forced->selection.size()) == config_.num_layers),
            "forced choices name {} and {} layers' routing and selection, not the model's {}",
            forced != nullptr ? forced->routes.size() : 0, forced != nullptr ? forced->selection.size() : 0,
            config_.num_layers);
  selection_.clear();
  selection_.resize(static_cast<size_t>(config_.num_layers));
  routes_.clear();
  routes_.resize(static_cast<size_t>(config_.num_layers));
  eager_logits_ = {};
  if (!need_selection && forced == nullptr && graph_shaped(b)) return forward_graph(pad_blocks(b));
  return run_eager(b, true, forced);
}

const float* ModelRunner::run_eager(const StepBatch& b, bool keep_selection, const ForcedChoices* forced) {
  const Step step = upload(b);
  const int64_t rows = static_cast<int64_t>(b.logit_rows.size());
  eager_logits_ = floats(rows * config_.vocab_size);
  run(step, rows, eager_logits_.data(), keep_selection, forced);
  return eager_logits_.data();
}

void ModelRunner::run(const Step& step, int64_t rows, float* logits, bool keep_selection,
                      const ForcedChoices* forced) {
  static const std::vector<int32_t> kNone;
  const ModelConfig& c = config_;
  const int64_t t = step.ctx.tokens, h = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);

  // The residual stream x; each sublayer's output `delta` is added to it by the norm that
  // follows (the next sublayer's, or the final one).
  Buffer<float> x = floats(t * h), normed = floats(t * h), delta = floats(t * h);
  const ResidentWeights::Linear embed = resident_(weights_.embed);
  backend_.gather_rows({.table = embed.w, .table_rows = weights_.embed.out, .dim = h,
                        .ids = step.tokens.data(), .count = t, .out = x.data(), .table_bf16 = embed.w_bf16});
  auto add_norm = [&](const float* add, const std::vector<float>& weight) {
    backend_.add_rms_norm({.x = x.data(), .delta = add, .weight = resident_(weight),
                           .y = normed.data(), .rows = t, .dim = h, .eps = eps,
                           .gemma = c.gemma_norm});
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& layer = weights_.layers[l];
    add_norm(l == 0 ? nullptr : delta.data(), layer.input_norm);
    attention(l, step, normed.data(), delta.data(), keep_selection, forced != nullptr ? forced->selection[l] : kNone);
    add_norm(delta.data(), layer.post_attention_norm);
    if (layer.moe) {
      moe(layer.moe_weights, normed.data(), t, delta.data(), keep_selection ? &routes_[l] : nullptr,
          forced != nullptr ? forced->routes[l] : kNone);
    } else {
      mlp(layer.mlp, normed.data(), t, delta.data());
    }
  }
  add_norm(delta.data(), weights_.final_norm);
  // Only the rows whose next token is wanted reach the vocabulary projection.
  Buffer<float> last = floats(rows * h);
  backend_.gather_rows({.table = normed.data(), .table_rows = t, .dim = h,
                        .ids = step.logit_rows.data(), .count = rows, .out = last.data()});
  linear(weights_.output(), last.data(), rows, logits);
}

std::vector<std::vector<int32_t>> ModelRunner::last_selection() const {
  std::vector<std::vector<int32_t>> out;
  for (const Buffer<int32_t>& layer : selection_) out.push_back(layer.download());
  return out;
}

std::vector<std::vector<int32_t>> ModelRunner::last_routes() const {
  std::vector<std::vector<int32_t>> out;
  for (const Buffer<int32_t>& layer : routes_) out.push_back(layer.download());
  return out;
}

}  // namespace fp4::model
