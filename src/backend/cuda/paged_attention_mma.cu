// Paged attention, tensor-core kernel for BF16, FP8 and NVFP4 pages (mma.sync m16n8k16, BF16
// in, FP32 accumulation). Design, bytes and numerics: docs/kernels/attention_decode.md.
//
// One CTA of 4 warps per (token, KV head, split); the group's query heads are the MMA's 16 rows
// (zero rows pad a smaller group). The CTA first resolves its split's blocks to pages (all at
// once, so the block loop never waits on a selection or block-table load). Warp w takes keys
// [16w, 16w + 16) and [64 + 16w, 80 + 16w) of every block: it stages them (K and V, BF16 without
// the per-layer scale) in its own shared-memory tile, so the block loop needs no CTA barrier,
// with the next sub-tile's loads in flight while the current one computes; each warp keeps its
// own online softmax, and the four warps' states are merged once at the end.
//
// Exactness: NVFP4 values (E2M1 x E4M3 block scale) and FP8 values (E4M3) are exact in BF16,
// and BF16 pages are BF16; the per-layer scale (FP8 scale, NVFP4 global scale) multiplies the
// FP32 scores and outputs instead. Q and P are FP32, split into BF16 hi + lo (two MMAs each),
// which leaves a relative error of 2^-18 per product instead of BF16's 2^-9.
#include <cuda_runtime.h>

#include "backend/cuda/paged_attention_device.cuh"
#include "backend/cuda/paged_attention_launch.h"
#include "backend/cuda/paged_attention_mma.cuh"

namespace fp4::cuda::detail {
namespace {

using namespace tc;

constexpr int kThreads = kAttentionThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 16;  // query heads per CTA: the MMA's M
constexpr int kSubTiles = kBlockTokens / (kWarps * kSub);
// Resident CTAs per SM the register budget aims at: four where 128 registers hold everything;
// at head_dim 128, FP8 and NVFP4 need more for the raw sub-tile in flight and its
// dequantization (NVFP4: 3 CTAs, 168 registers; FP8: 2 CTAs, as it spills at 168).
template <KvFormat F, int D>
constexpr int kMinCtas = D < 128 || F == KvFormat::kBF16 ? 4 : F == KvFormat::kNVFP4 ? 3 : 2;

constexpr int kItemBatch = 64;  // blocks (or selection slots) whose pages are resolved at once

// Block -> page for one item of the split, before the pipeline starts: page byte offset and
// visible keys, or -1 for padding; an invalid index sets *bad.
__device__ __forceinline__ void resolve_item(const AttentionArgs& a, CtaWork w, int item,
                                             int64_t& page_offset, int& keys, int* bad) {
  keys = 0;
  const uint8_t* page = item_page(a, w, item, keys);
  page_offset = page != nullptr ? page - a.pool : -1;
  if (w.bad) *bad = 1;
}

template <KvFormat F, int D>
__global__ void __launch_bounds__(kThreads, kMinCtas<F, D>) attention_tensor_core(const AttentionArgs a) {
  constexpr bool kBf16 = F == KvFormat::kBF16;
  constexpr int P = D + 8;  // BF16 row pitch: the 8 rows of an ldmatrix hit distinct banks
  constexpr int kKSteps = D / 16, kNTiles = D / 8;
  __shared__ __align__(16) uint16_t q_s[2][kRows * P];          // Q as BF16 hi and lo
  __shared__ __align__(16) uint16_t kv_s[kWarps][2][kSub * P];  // per warp: K, V; then outputs
  __shared__ float ml_s[kWarps][kRows][2];
  __shared__ int64_t page_s[kItemBatch];
  __shared__ int keys_s[kItemBatch];
  __shared__ int bad_s;
  static_assert(sizeof(kv_s) == kWarps * kRows * P * sizeof(float), "outputs reuse the tiles");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, grp = lane / 4, tig = lane % 4;
  CtaWork w = cta_work(a);

  for (int i = threadIdx.x; i < kRows * D / 4; i += kThreads) {
    const int h = i / (D / 4), c = i % (D / 4);
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (h < a.group) x = __ldg(reinterpret_cast<const float4*>(a.q + out_row(a, w, h) * D) + c);
    uint32_t hi[2], lo[2];
    split_bf16(x.x, x.y, hi[0], lo[0]);
    split_bf16(x.z, x.w, hi[1], lo[1]);
    *reinterpret_cast<uint2*>(&q_s[0][h * P + 4 * c]) = make_uint2(hi[0], hi[1]);
    *reinterpret_cast<uint2*>(&q_s[1][h * P + 4 * c]) = make_uint2(lo[0], lo[1]);
  }
  if (threadIdx.x == 0) bad_s = w.bad ? 1 : 0;

  uint16_t* k_s = kv_s[warp][0];
  uint16_t* v_s = kv_s[warp][1];
  // Fragment rows: this lane holds rows grp (r = 0) and grp + 8 (r = 1) of S, P and O.
  float o[kNTiles][4] = {};
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
  const float kq = a.k_scale * a.score_scale;
  // ldmatrix: lane j gives row j % 8 of matrix j / 8.
  const int a_row = (lane / 8 % 2) * 8 + lane % 8, a_col = (lane / 16) * 8;  // Q, and V (trans)
  const int b_row = (lane / 16) * 8 + lane % 8, b_col = (lane / 8 % 2) * 8;  // K
  RawSub<F, D> raw;

  for (int base = w.first; base < w.last; base += kItemBatch) {
    const int count = min(kItemBatch, w.last - base);
    __syncthreads();  // q_s and bad_s are written; the previous batch's list is consumed
    if (threadIdx.x < count) resolve_item(a, w, base + threadIdx.x, page_s[threadIdx.x], keys_s[threadIdx.x], &bad_s);
    __syncthreads();

    // This warp's sub-tiles, in order: (item, sub) with key0 = (4 sub + warp) 16 < keys.
    auto next = [&](int& item, int& sub) {
      do {
        if (++sub == kSubTiles) {
          sub = 0;
          ++item;
        }
      } while (item < count && (page_s[item] < 0 || (sub * kWarps + warp) * kSub >= keys_s[item]));
    };
    auto issue = [&](int item, int sub) {
      const uint8_t* page = a.pool + page_s[item];
      const int key0 = (sub * kWarps + warp) * kSub;
      const int row0 = w.g * kBlockTokens + key0, valid = min(kSub, keys_s[item] - key0);
      if constexpr (kBf16) {
        issue_bf16<D>(k_s, page + a.k_codes, row0, valid, lane);
        issue_bf16<D>(v_s, page + a.v_codes, row0, valid, lane);
      } else {
        load_raw(raw, a, page, row0, valid, lane);
      }
    };
    int item = 0, sub = -1;
    next(item, sub);
    if (item < count) issue(item, sub);
    // Software pipeline: the next sub-tile's loads are in flight while this one computes.
    // BF16: K of the next sub-tile is issued once this QK is done, V once this P.V is done
    // (commit groups complete in order, so wait_group 1 means "all but the newest").
    while (item < count) {
      int next_item = item, next_sub = sub;
      next(next_item, next_sub);
      const bool more = next_item < count;
      const int valid = min(kSub, keys_s[item] - (sub * kWarps + warp) * kSub);
      if constexpr (kBf16) {
        cp_async_wait<1>();
      } else {
        land_raw(raw, k_s, v_s, lane);
        if (more) issue(next_item, next_sub);
      }
      __syncwarp();

      float s[2][4] = {};  // n-tile t: keys 8t .. 8t + 7
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        uint32_t qh[4], ql[4], kb[4];
        ldmatrix_x4(qh, &q_s[0][a_row * P + ks * 16 + a_col]);
        ldmatrix_x4(ql, &q_s[1][a_row * P + ks * 16 + a_col]);
        ldmatrix_x4(kb, &k_s[b_row * P + ks * 16 + b_col]);
        mma_m16n8k16(s[0], qh, kb[0], kb[1]);
        mma_m16n8k16(s[0], ql, kb[0], kb[1]);
        mma_m16n8k16(s[1], qh, kb[2], kb[3]);
        mma_m16n8k16(s[1], ql, kb[2], kb[3]);
      }
      if constexpr (kBf16) {
        if (more) {
          __syncwarp();  // every lane's reads of k_s are done
          const int key0 = (next_sub * kWarps + warp) * kSub;
          issue_bf16<D>(k_s, a.pool + page_s[next_item] + a.k_codes, w.g * kBlockTokens + key0,
                        min(kSub, keys_s[next_item] - key0), lane);
        }
      }

      uint32_t ph[4], pl[4];  // P as the A fragment of one 16-key step
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float x[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = (e / 2) * 8 + 2 * tig + e % 2;
          x[e] = key < valid ? s[e / 2][2 * r + e % 2] * kq : neg_inf();
        }
        float top = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
        const float m_new = fmaxf(m[r], top);
        alpha[r] = rescale_factor(m[r], m_new);
        m[r] = m_new;
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) p[e] = weight(x[e], m_new);
        l[r] = l[r] * alpha[r] + ((p[0] + p[1]) + (p[2] + p[3]));  // this lane's share of the row
        split_bf16(p[0], p[1], ph[r], pl[r]);
        split_bf16(p[2], p[3], ph[2 + r], pl[2 + r]);
      }
      // Once the row maxima settle, most sub-tiles rescale by exactly 1: skip those multiplies.
      if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
        for (int t = 0; t < kNTiles; ++t) {
          o[t][0] *= alpha[0];
          o[t][1] *= alpha[0];
          o[t][2] *= alpha[1];
          o[t][3] *= alpha[1];
        }
      }
      if constexpr (kBf16) {
        if (more) cp_async_wait<1>();
        else cp_async_wait<0>();
        __syncwarp();
      }

#pragma unroll
      for (int t = 0; t < kNTiles; t += 2) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, &v_s[a_row * P + t * 8 + a_col]);
        mma_m16n8k16(o[t], ph, vb[0], vb[1]);
        mma_m16n8k16(o[t], pl, vb[0], vb[1]);
        mma_m16n8k16(o[t + 1], ph, vb[2], vb[3]);
        mma_m16n8k16(o[t + 1], pl, vb[2], vb[3]);
      }
      __syncwarp();  // every lane's reads of v_s are done
      if constexpr (kBf16) {
        if (more) {
          const int key0 = (next_sub * kWarps + warp) * kSub;
          issue_bf16<D>(v_s, a.pool + page_s[next_item] + a.v_codes, w.g * kBlockTokens + key0,
                        min(kSub, keys_s[next_item] - key0), lane);
        }
      }
      item = next_item;
      sub = next_sub;
    }
  }

  // Merge the four warps' softmax states: out = sum_w 2^(m_w - M) O_w / sum_w 2^(m_w - M) l_w.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  __syncthreads();  // every warp is done with its tiles; bad_s is final
  w.bad = bad_s != 0;
  float* o_s = reinterpret_cast<float*>(&kv_s[0][0][0]);  // [kWarps][kRows][P]
#pragma unroll
  for (int t = 0; t < kNTiles; ++t) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      *reinterpret_cast<float2*>(&o_s[(warp * kRows + grp + 8 * r) * P + t * 8 + 2 * tig]) =
          make_float2(o[t][2 * r], o[t][2 * r + 1]);
    }
  }
  if (tig == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      ml_s[warp][grp + 8 * r][0] = m[r];
      ml_s[warp][grp + 8 * r][1] = l[r];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kRows * D; i += kThreads) {
    const int h = i / D, d = i % D;
    if (h >= a.group) break;  // padding rows
    float top = neg_inf();
#pragma unroll
    for (int v = 0; v < kWarps; ++v) top = fmaxf(top, ml_s[v][h][0]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) {
      const float f = weight(ml_s[v][h][0], top);
      sum = fmaf(ml_s[v][h][1], f, sum);
      acc = fmaf(o_s[(v * kRows + h) * P + d], f, acc);
    }
    const RowEnd end = row_end(a, w, top, sum, a.v_scale);
    out_ptr(a, w, h)[d] = acc * end.scale;
    if (d == 0) store_lse(a, w, h, end.lse);
  }
}

template <KvFormat F, int D>
cudaError_t launch_or_count(const AttentionArgs& a, cudaStream_t stream, int* ctas_per_sm) {
  if (ctas_per_sm != nullptr) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, attention_tensor_core<F, D>, kThreads, 0);
  }
  attention_tensor_core<F, D><<<dim3(a.tokens, a.kv_heads, a.splits), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template <KvFormat F>
cudaError_t launch_or_count(const AttentionArgs& a, cudaStream_t stream, int* ctas_per_sm) {
  switch (a.head_dim) {
    case 32: return launch_or_count<F, 32>(a, stream, ctas_per_sm);
    case 64: return launch_or_count<F, 64>(a, stream, ctas_per_sm);
    case 128: return launch_or_count<F, 128>(a, stream, ctas_per_sm);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_or_count(const AttentionArgs& a, cudaStream_t stream, int* ctas_per_sm) {
  switch (a.format) {
    case KvFormat::kBF16: return launch_or_count<KvFormat::kBF16>(a, stream, ctas_per_sm);
    case KvFormat::kFP8: return launch_or_count<KvFormat::kFP8>(a, stream, ctas_per_sm);
    case KvFormat::kNVFP4: return launch_or_count<KvFormat::kNVFP4>(a, stream, ctas_per_sm);
    case KvFormat::kF32: break;  // FP32 is not exact in BF16
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_attention_tensor_core(const AttentionArgs& a, cudaStream_t stream) {
  return launch_or_count(a, stream, nullptr);
}

cudaError_t tensor_core_ctas_per_sm(const AttentionArgs& a, int* ctas) {
  return launch_or_count(a, nullptr, ctas);
}

}  // namespace fp4::cuda::detail
