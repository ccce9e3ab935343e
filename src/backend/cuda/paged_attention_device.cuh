// Device code shared by the two paged attention kernels: which blocks a CTA reads, how an
// invalid index is handled, and where a finished row goes.
//
// Device code cannot throw, and the step's indices live in device memory, so the kernels check
// what the CPU reference rejects (a sequence or page out of range, a selected block after the
// token's own or past the block table) and turn the whole (token, KV head) output into NaN
// instead of reading out of bounds. Negative selection ids are padding, as on the CPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/paged_attention_launch.h"

namespace fp4::cuda::detail {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float nan_f32() { return __int_as_float(0x7fc00000); }

// 16-bit operands (AttentionOperands::k16Bit): FP16 for the page formats whose values it holds
// exactly, BF16 for the others; x rounded to it and read back by the hardware conversions,
// round to nearest even with FP16 subnormals kept (formats/attention_operands.h's bits).
template <KvFormat F>
constexpr bool kOperandsF16 = F == KvFormat::kFP8 || F == KvFormat::kNVFP4;

template <bool kF16>
__device__ __forceinline__ float round16(float x) {
  if constexpr (kF16) return __half2float(__float2half_rn(x));
  else return __bfloat162float(__float2bfloat16_rn(x));
}

// The (token, KV head, split) a CTA computes and the items (blocks when dense, selection slots
// when sparse) of its split.
struct CtaWork {
  int t, g, split;
  int pos, seq;
  int first, last;
  bool bad;
};

__device__ __forceinline__ CtaWork cta_work(const AttentionArgs& a) {
  CtaWork w;
  w.t = blockIdx.x;
  w.g = blockIdx.y;
  w.split = blockIdx.z;
  w.pos = a.positions[w.t];
  w.seq = a.seq_of_token[w.t];
  w.bad = w.pos < 0 || w.seq < 0 || w.seq >= a.num_seqs;
  const int items = w.bad ? 0 : (a.selected != nullptr ? a.topk : w.pos / kBlockTokens + 1);
  w.first = w.split * a.blocks_per_split;
  w.last = min(items, w.first + a.blocks_per_split);
  return w;
}

// The block item i names: its selection entry when sparse (-1 and any negative id are
// padding), the block itself when dense. The entry's address does not depend on the token's
// position, so a kernel may load it beside the step's indices.
__device__ __forceinline__ int item_block(const AttentionArgs& a, int t, int g, int i) {
  return a.selected != nullptr ? a.selected[(int64_t{g} * a.tokens + t) * a.topk + i] : i;
}

// The page of `block` and its count of visible keys, or nullptr for padding and for an invalid
// index (which also sets w.bad).
__device__ __forceinline__ const uint8_t* block_page(const AttentionArgs& a, CtaWork& w, int block, int& keys) {
  if (block < 0) return nullptr;
  if (block > w.pos / kBlockTokens || block >= a.max_blocks) {
    w.bad = true;
    return nullptr;
  }
  const int page = a.block_tables[int64_t{w.seq} * a.max_blocks + block];
  if (page < 0 || page >= a.num_pages) {
    w.bad = true;
    return nullptr;
  }
  keys = min(kBlockTokens, w.pos + 1 - block * kBlockTokens);
  return a.pool + int64_t{page} * a.page_bytes;
}

// The page of item i (see block_page). In the CUDA-core kernel every thread asks for the same
// item, so branches on the result are uniform; the tensor-core kernel resolves one item per
// thread.
__device__ __forceinline__ const uint8_t* item_page(const AttentionArgs& a, CtaWork& w, int i, int& keys) {
  return block_page(a, w, item_block(a, w.t, w.g, i), keys);
}

// Row of query head h of the CTA's group: the output itself when there is one split, else
// this split's partial output.
__device__ __forceinline__ int64_t out_row(const AttentionArgs& a, const CtaWork& w, int h) {
  return int64_t{w.t} * a.q_heads + int64_t{w.g} * a.group + h;
}

__device__ __forceinline__ float* out_ptr(const AttentionArgs& a, const CtaWork& w, int h) {
  const int64_t row = out_row(a, w, h);
  if (a.splits == 1) return a.out + row * a.head_dim;
  return a.partial_out + (int64_t{w.split} * a.tokens * a.q_heads + row) * a.head_dim;
}

// A finished row's normalizer: the output is acc * scale where scale folds 1/l and the V scale
// the kernel left out. With one split, l == 0 (no key at all) gives 0/0 = NaN as on the CPU; a
// split with no key writes zeros and lse = -inf, which the merge ignores.
struct RowEnd {
  float scale;
  float lse;
};

__device__ __forceinline__ RowEnd row_end(const AttentionArgs& a, const CtaWork& w, float m,
                                          float l, float v_scale) {
  if (w.bad) return {nan_f32(), nan_f32()};
  if (a.splits > 1 && l == 0.0f) return {0.0f, neg_inf()};
  return {v_scale / l, m + log2f(l)};
}

__device__ __forceinline__ void store_lse(const AttentionArgs& a, const CtaWork& w, int h,
                                          float lse) {
  if (a.splits > 1) a.partial_lse[int64_t{w.split} * a.tokens * a.q_heads + out_row(a, w, h)] = lse;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// 2^x by the hardware's approximation (MUFU.EX2, relative error at most 2 ulp, the same as
// exp2f's) with subnormal results flushed to zero: a weight below 2^-126 against a row whose
// weights sum to at least 1. exp2f spends about five more instructions a call on keeping them.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The online-softmax step of one row: the new running max, the factor that rescales what was
// accumulated, and exp2 of a logit. -inf logits (masked keys) weigh exactly 0, and a row that
// has seen only -inf keeps factor 1 instead of exp2(-inf - -inf) = NaN.
__device__ __forceinline__ float rescale_factor(float m_old, float m_new) {
  return m_old == m_new ? 1.0f : exp2_ftz(m_old - m_new);
}

__device__ __forceinline__ float weight(float s, float m) {
  return s == neg_inf() ? 0.0f : exp2_ftz(s - m);
}

// O *= alpha per row for an MMA accumulator of kNTiles n-tiles (this lane's rows grp and
// grp + 8), skipped when no row of the warp moved its reference (alpha exactly 1).
template <int kNTiles>
__device__ __forceinline__ void rescale_rows(float o[][4], const float alpha[2]) {
  if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
    for (int t = 0; t < kNTiles; ++t) {
      o[t][0] *= alpha[0];
      o[t][1] *= alpha[0];
      o[t][2] *= alpha[1];
      o[t][3] *= alpha[1];
    }
  }
}

}  // namespace fp4::cuda::detail
