// The fused pre-attention step on the GPU: fp4::cpu::pre_attention's contract
// (backend/model_ops.h PreAttentionParams) in one kernel, so the projections' output is read
// once and nothing between the norm and the cache write goes back to global memory.
// Design and numerics: docs/kernels/pre_attention.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/cache_insert.h"
#include "backend/model_ops.h"

namespace fp4::cuda {

// Pointers in `p` are device pointers except the two page layouts, host objects read at the
// call. Asynchronous on `stream`. The params are checked as on the CPU (check_pre_attention),
// plus: rotary_dim at most 256 and heads of at most 1024 values. Indices that live on the
// device cannot be checked by the host: a token whose sequence, block or page is out of range
// gets its q and index_q written but nothing inserted. Tokens of one step must have distinct
// slots. q_out may be q.x itself when q's rows are dense (each head is read, by plain loads,
// before it is written).
void pre_attention(const PreAttentionParams& p, cudaStream_t stream);

namespace detail {

// One head family of the step (q, k, v, index_q, index_k), by value.
struct HeadSetArgs {
  const float* x = nullptr;
  int64_t stride = 0;
  const float* norm = nullptr;  // [dim] or nullptr
  int heads = 0, dim = 0;
  bool rotate = false;
  float* out = nullptr;         // [tokens, heads, dim], or nullptr
  int cache = -1;               // the cache (index into caches) the heads go to, or -1
  int plane = 0;                // in that cache: 0 K, 1 V
  int stage = -1;               // offset (floats) of the family in the CTA's stage, when staged
};

constexpr int kPreAttentionThreads = 256;
constexpr int kMaxRotaryPairs = 128;
constexpr int kMaxHeadSets = 5;

struct PreAttentionArgs {
  const int32_t* positions = nullptr;
  const int32_t* seq_of_token = nullptr;
  const int32_t* block_tables = nullptr;
  int tokens = 0, num_seqs = 0, max_blocks = 0;
  HeadSetArgs sets[kMaxHeadSets];
  int num_sets = 0;
  CacheTarget caches[2];
  int num_caches = 0;
  // Staged inserts (stage_floats > 0): a cache whose group is more than one head (a layout of
  // heads narrower than a block flattens them) takes a token's K, V and index-K from a stage in
  // shared memory, source[cache][plane] floats in; otherwise each head is inserted as group h.
  int source[2][2] = {{0, 0}, {0, 0}};
  int stage_floats = 0;
  float eps = 1e-6f;
  bool gemma = false;
  int rotary_pairs = 0;                  // rotary_dim / 2
  double inv_freq[kMaxRotaryPairs] = {};
  int max_dim = 0;
};

// Dynamic shared memory of one CTA for `a`.
size_t pre_attention_smem_bytes(const PreAttentionArgs& a);
// CTAs a token on a GPU of `sms` SMs (the grid's y): one for staged inserts; else a token's head
// vectors over ceil(vectors / 8) CTAs, a vector a warp, while the step has fewer than about four
// CTAs an SM, and fewer CTAs (at least one, its warps taking several vectors each) past that.
int pre_attention_parts(const PreAttentionArgs& a, int sms);
cudaError_t launch_pre_attention(const PreAttentionArgs& a, cudaStream_t stream);

}  // namespace detail
}  // namespace fp4::cuda
