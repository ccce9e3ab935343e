#include "backend/cuda/pre_attention.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/pre_attention_params.h"

namespace fp4::cuda {

void pre_attention(const PreAttentionParams& p, cudaStream_t stream) {
  check_pre_attention(p);
  const PagedContext& c = p.ctx;
  FP4_CHECK(p.rotary_dim / 2 <= detail::kMaxRotaryPairs, "pre_attention: rotary_dim {} is over the kernel's {}",
            p.rotary_dim, 2 * detail::kMaxRotaryPairs);
  FP4_CHECK(p.head_dim <= 1024 && p.index_head_dim <= 1024, "pre_attention: heads of {} and {} values are over 1024",
            p.head_dim, p.index_head_dim);
  const bool index = has_index_branch(p);
  detail::PreAttentionArgs a;
  a.caches[0] = detail::cache_target(*p.kv_layout, p.kv_pool, p.num_pages, p.kv_scales, "pre_attention");
  a.num_caches = 1;
  if (index) {
    a.caches[1] = detail::cache_target(*p.index_layout, p.index_pool, p.num_pages, {p.index_scale, 1.0f},
                                       "pre_attention");
    a.num_caches = 2;
  }
  if (c.tokens == 0) return;
  a.positions = c.positions;
  a.seq_of_token = c.seq_of_token;
  a.block_tables = c.block_tables;
  FP4_CHECK(c.tokens < (int64_t{1} << 31) && c.num_seqs * c.max_blocks < (int64_t{1} << 31),
            "pre_attention: {} tokens or {} x {} block tables exceed one launch", c.tokens, c.num_seqs,
            c.max_blocks);
  a.tokens = static_cast<int>(c.tokens);
  a.num_seqs = static_cast<int>(c.num_seqs);
  a.max_blocks = static_cast<int>(c.max_blocks);
  a.eps = p.eps;
  a.gemma = p.gemma;
  a.rotary_pairs = static_cast<int>(p.rotary_dim / 2);
  for (int j = 0; j < a.rotary_pairs; ++j) a.inv_freq[j] = rope_inv_freq(p.theta, p.rotary_dim, j);

  const int d = static_cast<int>(p.head_dim), kv = static_cast<int>(p.kv_heads);
  auto add = [&](const HeadInput& in, int heads, int dim, bool rotate, float* out, int cache, int plane) {
    a.sets[a.num_sets++] = {.x = in.x, .stride = in.stride, .norm = in.norm, .heads = heads, .dim = dim,
                            .rotate = rotate && a.rotary_pairs > 0, .out = out, .cache = cache, .plane = plane};
    a.max_dim = std::max(a.max_dim, dim);
  };
  // Cache 0 takes K (plane 0) and V (plane 1), cache 1 index-K.
  add(p.q, static_cast<int>(p.q_heads), d, true, p.q_out, -1, 0);
  const int k_set = a.num_sets;
  add(p.k, kv, d, true, p.k_out, 0, 0);
  add({.x = p.v.x, .stride = p.v.stride, .norm = nullptr}, kv, d, false, nullptr, 0, 1);
  int index_k_set = -1;
  if (index) {
    const int di = static_cast<int>(p.index_head_dim);
    add(p.index_q, static_cast<int>(p.index_heads), di, true, p.index_q_out, -1, 0);
    index_k_set = a.num_sets;
    add(p.index_k, 1, di, true, p.index_k_out, 1, 0);
  }
  // A K/V group of more than one head (the index cache holds one head) needs the stage: the
  // token's K, then V, then index-K, as the caches' groups lay them out.
  if (a.caches[0].groups != kv) {
    a.sets[k_set].stage = 0;
    a.sets[k_set + 1].stage = kv * d;
    a.source[0][0] = 0;
    a.source[0][1] = kv * d;
    a.stage_floats = 2 * kv * d;
    if (index_k_set >= 0) {
      a.sets[index_k_set].stage = a.stage_floats;
      a.source[1][0] = a.stage_floats;
      a.stage_floats += static_cast<int>(p.index_head_dim);
    }
  }
  const size_t smem = detail::pre_attention_smem_bytes(a);
  FP4_CHECK(smem <= 227 * 1024, "pre_attention: {} KV heads of {} need {} bytes of shared memory per token", kv, d,
            smem);
  FP4_CUDA_CHECK(detail::launch_pre_attention(a, stream));
}

}  // namespace fp4::cuda
