// The pre-attention step on the CPU: the reference the fused GPU kernel is held to, written as
// the ops it fuses (rms_norm, rope, cache_insert) run one after another.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/pre_attention_params.h"
#include "core/check.h"

namespace fp4::cpu {
namespace {

// Rows of `in` (token r at r * stride) copied to a dense [tokens, heads * dim] buffer, normed
// per head and rotated.
void norm_and_rotate(const PreAttentionParams& p, const HeadInput& in, int64_t heads, int64_t dim, bool rotate,
                     float* out) {
  const int64_t tokens = p.ctx.tokens, width = heads * dim;
  for (int64_t t = 0; t < tokens; ++t) std::copy_n(in.x + t * in.stride, width, out + t * width);
  if (in.norm != nullptr) {
    rms_norm({.x = out, .weight = in.norm, .y = out, .rows = tokens * heads, .dim = dim, .eps = p.eps,
              .gemma = p.gemma});
  }
  if (rotate && p.rotary_dim > 0) {
    rope({.x = out, .positions = p.ctx.positions, .tokens = tokens, .heads = heads, .head_dim = dim,
          .rotary_dim = p.rotary_dim, .theta = p.theta});
  }
}

}  // namespace

void pre_attention(const PreAttentionParams& p) {
  check_pre_attention(p);
  const PagedContext& c = p.ctx;
  const int64_t tokens = c.tokens;
  if (tokens == 0) return;
  const int64_t page_tokens = p.kv_layout->page_tokens;
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    FP4_CHECK(c.seq_of_token[t] >= 0 && c.seq_of_token[t] < c.num_seqs && c.positions[t] >= 0 &&
                  c.positions[t] / page_tokens < c.max_blocks,
              "pre_attention: token {} has sequence {} (of {}) and position {} (block tables of {} blocks)", t,
              c.seq_of_token[t], c.num_seqs, c.positions[t], c.max_blocks);
    const int64_t page = c.block_tables[c.seq_of_token[t] * c.max_blocks + c.positions[t] / page_tokens];
    slots[t] = page * page_tokens + c.positions[t] % page_tokens;
  }

  norm_and_rotate(p, p.q, p.q_heads, p.head_dim, true, p.q_out);
  const int64_t kv_width = p.kv_heads * p.head_dim;
  std::vector<float> k_scratch, v(static_cast<size_t>(tokens * kv_width));
  if (p.k_out == nullptr) k_scratch.resize(v.size());
  float* k = p.k_out != nullptr ? p.k_out : k_scratch.data();
  norm_and_rotate(p, p.k, p.kv_heads, p.head_dim, true, k);
  norm_and_rotate(p, {.x = p.v.x, .stride = p.v.stride, .norm = nullptr}, p.kv_heads, p.head_dim, false, v.data());
  cache_insert({.layout = p.kv_layout, .pool = p.kv_pool, .num_pages = p.num_pages, .k = k, .v = v.data(),
                .slots = slots.data(), .tokens = tokens, .scales = p.kv_scales});
  if (!has_index_branch(p)) return;

  norm_and_rotate(p, p.index_q, p.index_heads, p.index_head_dim, true, p.index_q_out);
  std::vector<float> ik_scratch;
  if (p.index_k_out == nullptr) ik_scratch.resize(static_cast<size_t>(tokens * p.index_head_dim));
  float* ik = p.index_k_out != nullptr ? p.index_k_out : ik_scratch.data();
  norm_and_rotate(p, p.index_k, 1, p.index_head_dim, true, ik);
  cache_insert({.layout = p.index_layout, .pool = p.index_pool, .num_pages = p.num_pages, .k = ik, .v = nullptr,
                .slots = slots.data(), .tokens = tokens, .scales = {p.index_scale, 1.0f}});
}

}  // namespace fp4::cpu
