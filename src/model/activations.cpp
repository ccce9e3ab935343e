#include "model/activations.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/check.h"
#include "core/int_math.h"

namespace fp4::model {
namespace {

constexpr int64_t kAct = 2;  // BF16 activations
constexpr int64_t kF32 = 4;

int64_t per_gpu(int64_t heads, int tp) { return std::max<int64_t>(1, heads / tp); }

}  // namespace

ActivationEstimate estimate_activations(const ModelConfig& c, const ActivationInputs& in) {
  FP4_CHECK(in.max_num_batched_tokens > 0, "max-num-batched-tokens must be positive, got {}",
            in.max_num_batched_tokens);
  FP4_CHECK(in.max_num_seqs > 0, "max-num-seqs must be positive, got {}", in.max_num_seqs);
  FP4_CHECK(in.tp > 0, "tensor-parallel size must be positive, got {}", in.tp);
  const int64_t T = in.max_num_batched_tokens, h = c.hidden_size;
  ActivationEstimate a;
  a.residual = 2 * T * h * kAct;

  const int64_t q = per_gpu(c.num_heads, in.tp) * c.head_dim;
  const int64_t kv = per_gpu(c.num_kv_heads, in.tp) * c.head_dim;
  const bool sparse = c.count_sparse_layers() > 0;
  const int64_t index_heads = sparse ? per_gpu(c.num_index_heads, in.tp) : 0;
  const int64_t projections = q + 2 * kv + (sparse ? (index_heads + 1) * c.index_head_dim : 0);
  a.attention = T * (projections + q) * kAct;
  if (sparse) {
    // The indexer scores every visible block of every query: [index heads, T, blocks] in FP32.
    const int64_t blocks = ceil_div(std::max<int64_t>(in.max_model_len, 1), c.sparse_block_size);
    a.attention += index_heads * T * blocks * kF32;
  }

  if (c.is_moe()) {
    // Balanced routing: the GPUs of one expert-parallel group receive, on average, the
    // T x top-k token copies of each of their data-parallel ranks, i.e. T x top-k / tp each.
    // Each copy passes through its input, gate|up, activated and output rows.
    const int64_t copies = ceil_div(T * c.num_experts_per_tok, in.tp);
    a.moe = copies * (2 * h + 3 * c.moe_intermediate_size) * kAct + T * c.num_experts * kF32 +
            T * 3 * ceil_div(c.shared_intermediate_size, in.tp) * kAct;
  }
  if (c.dense_intermediate_size > 0) {
    a.dense_mlp = T * 3 * ceil_div(c.dense_intermediate_size, in.tp) * kAct;
  }
  a.logits = std::min(T, in.max_num_seqs) * c.vocab_size * (kAct + 2 * kF32);

  const std::pair<int64_t, std::string_view> phases[] = {
      {a.attention, "attention"}, {a.moe, "MoE"}, {a.dense_mlp, "dense MLP"},
      {a.logits, "logits"}};
  const auto* largest = std::max_element(std::begin(phases), std::end(phases),
                                         [](auto& x, auto& y) { return x.first < y.first; });
  a.peak = a.residual + largest->first;
  a.peak_phase = largest->second;
  return a;
}

}  // namespace fp4::model
