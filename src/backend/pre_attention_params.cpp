#include "backend/pre_attention_params.h"

#include <cmath>

#include "core/check.h"

namespace fp4 {
namespace {

using kvcache::PageDType;

void check_input(const HeadInput& in, int64_t heads, int64_t dim, const char* name) {
  FP4_CHECK(in.x != nullptr, "pre_attention: {} is missing", name);
  FP4_CHECK(in.stride >= heads * dim, "pre_attention: {} row stride {} is shorter than its {} x {} values",
            name, in.stride, heads, dim);
}

void check_scale(PageDType dtype, float scale, const char* name) {
  if (dtype != PageDType::kFP8 && dtype != PageDType::kNVFP4) return;
  FP4_CHECK(std::isfinite(scale) && scale > 0.0f, "pre_attention: the {} {} scale must be finite and positive, got {}",
            kvcache::page_dtype_name(dtype), name, scale);
}

}  // namespace

void check_pre_attention(const PreAttentionParams& p) {
  const PagedContext& c = p.ctx;
  FP4_CHECK(c.tokens >= 0, "pre_attention: {} tokens", c.tokens);
  FP4_CHECK(p.q_heads > 0 && p.kv_heads > 0 && p.head_dim > 0, "pre_attention: {} q heads, {} KV heads of {}",
            p.q_heads, p.kv_heads, p.head_dim);
  FP4_CHECK(p.eps > 0.0f, "pre_attention: eps {} must be positive", p.eps);
  FP4_CHECK(p.rotary_dim >= 0 && p.rotary_dim % 2 == 0 && p.rotary_dim <= p.head_dim,
            "pre_attention: rotary_dim {} must be even and at most head_dim {}", p.rotary_dim, p.head_dim);
  FP4_CHECK(p.kv_layout != nullptr && p.kv_layout->has_v, "pre_attention: the K/V page layout is missing");
  const kvcache::PageLayout& kv = *p.kv_layout;
  FP4_CHECK(kv.heads == p.kv_heads && kv.head_dim == p.head_dim,
            "pre_attention: K/V pages hold {} heads of {}, the step has {} of {}", kv.heads, kv.head_dim,
            p.kv_heads, p.head_dim);
  check_scale(kv.dtype, p.kv_scales.k, "K");
  check_scale(kv.dtype, p.kv_scales.v, "V");
  if (c.tokens == 0) return;
  FP4_CHECK(c.positions && c.seq_of_token && c.block_tables && c.num_seqs > 0 && c.max_blocks > 0,
            "pre_attention: positions, sequences and block tables ({} x {}) are required", c.num_seqs,
            c.max_blocks);
  FP4_CHECK(p.kv_pool != nullptr && p.num_pages > 0, "pre_attention: the K/V pool ({} pages) is missing",
            p.num_pages);
  FP4_CHECK(p.q_out != nullptr, "pre_attention: q_out is missing");
  check_input(p.q, p.q_heads, p.head_dim, "q");
  FP4_CHECK(p.q_out != p.q.x || p.q.stride == p.q_heads * p.head_dim,
            "pre_attention: q_out may be q itself only when q's rows are dense (stride {}, rows of {})", p.q.stride,
            p.q_heads * p.head_dim);
  check_input(p.k, p.kv_heads, p.head_dim, "k");
  check_input(p.v, p.kv_heads, p.head_dim, "v");
  if (!has_index_branch(p)) return;
  FP4_CHECK(p.index_heads > 0 && p.index_head_dim > 0, "pre_attention: {} index heads of {}", p.index_heads,
            p.index_head_dim);
  FP4_CHECK(p.rotary_dim <= p.index_head_dim, "pre_attention: rotary_dim {} is wider than the index heads' {}",
            p.rotary_dim, p.index_head_dim);
  check_input(p.index_q, p.index_heads, p.index_head_dim, "index_q");
  check_input(p.index_k, 1, p.index_head_dim, "index_k");
  FP4_CHECK(p.index_layout != nullptr && !p.index_layout->has_v, "pre_attention: the index page layout is missing");
  const kvcache::PageLayout& ix = *p.index_layout;
  FP4_CHECK(ix.heads == 1 && ix.head_dim == p.index_head_dim,
            "pre_attention: index pages hold {} heads of {}, the step has one of {}", ix.heads, ix.head_dim,
            p.index_head_dim);
  FP4_CHECK(ix.page_tokens == kv.page_tokens, "pre_attention: index pages of {} tokens beside K/V pages of {}",
            ix.page_tokens, kv.page_tokens);
  check_scale(ix.dtype, p.index_scale, "index-K");
  FP4_CHECK(ix.dtype != PageDType::kNVFP4 || p.index_scale == 1.0f,
            "pre_attention: NVFP4 index-K pages have no global scale, got {}", p.index_scale);
  FP4_CHECK(p.index_pool != nullptr && p.index_q_out != nullptr, "pre_attention: the index pool or index_q_out is missing");
}

}  // namespace fp4
