// Paged attention, tensor-core kernel for BF16, FP8 and NVFP4 pages (mma.sync m16n8k16, FP32
// accumulation; BF16 operands for BF16 pages, FP16 for FP8 and NVFP4 pages). Design, bytes and
// numerics: docs/kernels/attention_decode.md.
//
// One CTA of 4 warps per (token, KV head, split); the group's query heads are the MMA's 16 rows
// (zero rows pad a smaller group). The CTA first resolves its split's blocks to pages (all at
// once, so the block loop never waits on a selection or block-table load). Warp w takes keys
// [16w, 16w + 16) and [64 + 16w, 80 + 16w) of every block and stages them in its own shared
// memory (BF16: K and V tiles; FP8 and NVFP4: a ring of raw slots, read straight into the MMAs'
// fragments), so the block loop needs no CTA barrier, with the next sub-tiles' loads in flight
// while the current one computes; each warp keeps its own online softmax, and the four warps'
// states are merged once at the end.
//
// Exactness: BF16 pages are BF16; FP8 values (E4M3) and NVFP4 values (E2M1 x E4M3 block scale,
// times 2^-14) are exact in FP16. The per-layer scale (FP8 scale, NVFP4 global scale) multiplies
// the FP32 scores and outputs instead. Q and P are FP32, split into hi + lo of the tile's type
// (two MMAs each): a relative error of 2^-18 per product with BF16, 2^-22 with FP16. For FP16,
// each head of Q is first scaled by a power of two into [2^13, 2^14), and its scores divided by
// it again in FP32; P (below 2^8, the softmax reference's slack) keeps FP16's subnormal
// spacing, 2^-25 absolute per weight. With 16-bit operands (AttentionOperands::k16Bit) Q and P
// are one operand each, rounded to nearest: half the MMAs, and the rounding is the result's
// (the CPU reference rounds alike), not an error.
#include <cuda_runtime.h>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/paged_attention_device.cuh"
#include "backend/cuda/paged_attention_frag.cuh"
#include "backend/cuda/paged_attention_launch.h"
#include "backend/cuda/paged_attention_mma.cuh"

namespace fp4::cuda::detail {
namespace {

using namespace tc;

constexpr int kThreads = kAttentionThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 16;  // query heads per CTA: the MMA's M
constexpr int kSubTiles = kBlockTokens / (kWarps * kSub);
// Resident CTAs per SM the register budget aims at: four (128 registers). With the raw
// sub-tiles in shared memory rather than registers, ptxas fits every variant without spilling
// (NVFP4 and FP8 at head_dim 128: 127 and 123 registers). FP8 pages then fit three CTAs into
// an SM's shared memory (60 KB each), NVFP4 pages four (55 KB).
constexpr int kMinCtas = 4;

constexpr int kItemBatch = 64;  // blocks (or selection slots) whose pages are resolved at once

// Block -> page for one item of the split, before the pipeline starts: the page and its
// visible keys, or no keys for padding and for an invalid index (which sets bad).
__device__ __forceinline__ void resolve_block(const AttentionArgs& a, CtaWork w, int block,
                                              const uint8_t*& page, int& keys, bool& bad) {
  keys = 0;
  page = block_page(a, w, block, keys);
  bad = bad || w.bad;
}

// How far (in log2 units) a row's running reference may sit below its true maximum before the
// accumulated output is rescaled. Weights then reach at most 2^8, far inside FP32 and FP16
// (whose hi + lo split is relative), and the weights of a row still sum to at least 1 (its
// largest key weighs at least 1). Rescales become rare after a row's first sub-tile, which
// saves the D / 2 multiplies of a rescale on most sub-tiles.
constexpr float kRescaleSlack = 8.0f;

// The online-softmax step of one 16-key sub-tile (S in the MMA's accumulator layout; this lane
// holds rows grp and grp + 8): masks keys at or past `valid`, brings m, l and O up to date, and
// returns P as the A fragment of P V, hi and lo (16-bit operands, kLo false: ph alone).
template <bool kF16, bool kLo, int kNTiles>
__device__ __forceinline__ void softmax_step(const float s[2][4], int valid, const float kq[2], float m[2],
                                             float l[2], float o[][4], uint32_t ph[4], uint32_t pl[4], int tig) {
  float alpha[2], x[2][4];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int e = 0; e < 4; ++e) x[r][e] = s[e / 2][2 * r + e % 2] * kq[r];
  }
  if (valid < kSub) {  // the page's last keys: a warp-uniform branch, taken once a page at most
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if ((e / 2) * 8 + 2 * tig + e % 2 >= valid) x[0][e] = x[1][e] = neg_inf();
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float top = fmaxf(fmaxf(x[r][0], x[r][1]), fmaxf(x[r][2], x[r][3]));
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
    // The reference moves only when the row's maximum passes it by more than the slack (or it
    // is still -inf); a NaN maximum (an invalid row) makes the comparison false and keeps it.
    const float m_new = top > m[r] + kRescaleSlack || m[r] == neg_inf() ? fmaxf(m[r], top) : m[r];
    alpha[r] = rescale_factor(m[r], m_new);
    m[r] = m_new;
    // Masked keys are -inf and weigh exp2(-inf) = 0 against a finite reference; a row that has
    // seen only -inf keys (reference -inf) subtracts 0 instead, which keeps those weights 0.
    const float m_ref = m_new == neg_inf() ? 0.0f : m_new;
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = exp2_ftz(x[r][e] - m_ref);
    l[r] = l[r] * alpha[r] + ((p[0] + p[1]) + (p[2] + p[3]));  // this lane's share of the row
    if constexpr (kLo) {
      split<kF16>(p[0], p[1], ph[r], pl[r]);
      split<kF16>(p[2], p[3], ph[2 + r], pl[2 + r]);
    } else {
      ph[r] = pack16<kF16>(p[0], p[1]);
      ph[2 + r] = pack16<kF16>(p[2], p[3]);
    }
  }
  rescale_rows<kNTiles>(o, alpha);
}

// kLo: Q and P as hi + lo (AttentionOperands::kFP32); without it each is one 16-bit operand.
template <KvFormat F, int D, bool kLo>
__global__ void __launch_bounds__(kThreads, kMinCtas) attention_tensor_core(const AttentionArgs a) {
  constexpr bool kBf16 = F == KvFormat::kBF16, kF16 = !kBf16;
  constexpr int P = D + 8;  // 16-bit row pitch: the 8 rows of an ldmatrix hit distinct banks
  constexpr int kKSteps = D / 16, kNTiles = D / 8;
  // Per warp: BF16 pages, a K and a V tile (filled by cp.async); FP8 and NVFP4 pages, the raw
  // ring, read by fragments (paged_attention_frag.cuh). After the block loop the outputs reuse
  // the space.
  using Slot = FragSlot<F, D>;
  constexpr int kTileBytes = kSub * P * 2;
  constexpr int kRingBytes = kBf16 ? 0 : kRawStages<F> * Slot::kBytes;
  constexpr int kWarpBytes = kBf16 ? 2 * kTileBytes : kRingBytes;
  constexpr int kOutBytes = kWarps * kRows * P * 4;
  __shared__ __align__(16) uint16_t q_s[kLo ? 2 : 1][kRows * P];  // Q as hi and lo, or Q
  __shared__ __align__(16) uint8_t work_s[kWarps * kWarpBytes > kOutBytes ? kWarps * kWarpBytes : kOutBytes];
  __shared__ float ml_s[kWarps][kRows][2];
  __shared__ float q_factor_s[kRows];
  __shared__ const uint8_t* page_s[kItemBatch];
  __shared__ int keys_s[kItemBatch];
  __shared__ int bad_s;  // the row is NaN: an invalid position, sequence or index (kept in shared
                         // memory rather than a register through the block loop)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, grp = lane / 4, tig = lane % 4;
  allow_dependent_launch();  // the split merge waits for the partial outputs itself

  // The prologue waits on two memory round trips: Q's loads, the step's indices and the first
  // batch's selection entries (whose addresses need no index) are issued together, and the
  // block table entries follow once the position and the selection are in.
  // Q: thread i holds 8 elements of head i / (D / 8), its item's columns in K's order (qk_dim
  // for FP8 and NVFP4); a head's D / 8 threads are neighbours in one warp.
  constexpr int kQItems = kRows * D / 8, kQPerThread = (kQItems + kThreads - 1) / kThreads;
  static_assert(kQItems % 32 == 0, "Q's items fill whole warps, which reduce a head by shuffles");
  const int64_t q_row0 = int64_t{blockIdx.x} * a.q_heads + int64_t{blockIdx.y} * a.group;  // out_row's
  float qx[kQPerThread][8];
#pragma unroll
  for (int k = 0; k < kQPerThread; ++k) {
    const int i = threadIdx.x + k * kThreads, h = i / (D / 8), c = 8 * (i % (D / 8));
#pragma unroll
    for (int e = 0; e < 8; ++e) qx[k][e] = 0.0f;
    if (i < kQItems && h < a.group) {
      const float* row = a.q + (q_row0 + h) * D;
      if constexpr (kBf16) {
        const float4 lo4 = __ldg(reinterpret_cast<const float4*>(row + c));
        const float4 hi4 = __ldg(reinterpret_cast<const float4*>(row + c) + 1);
        const float in[8] = {lo4.x, lo4.y, lo4.z, lo4.w, hi4.x, hi4.y, hi4.z, hi4.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) qx[k][e] = in[e];
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) qx[k][e] = __ldg(row + qk_dim<F, D>(c) + qk_dim<F, D>(e));  // qk_dim_splits
      }
    }
  }
  const int tid = threadIdx.x;  // signed: a bad row's item count is negative
  const int first_item = blockIdx.z * a.blocks_per_split + tid;
  int first_block = first_item;  // dense: the item is the block
  if (a.selected != nullptr && tid < min(kItemBatch, a.blocks_per_split) && first_item < a.topk) {
    first_block = item_block(a, blockIdx.x, blockIdx.y, first_item);
  }
  CtaWork w = cta_work(a);
  bool item_bad = false;  // an invalid index among this thread's items
  if (tid < min(kItemBatch, w.last - w.first)) {
    resolve_block(a, w, first_block, page_s[tid], keys_s[tid], item_bad);
  }

  // Q as hi + lo in the tiles' type (one part with 16-bit operands). FP16: each head first
  // scaled by the power of two that puts its largest magnitude into range.
#pragma unroll
  for (int k = 0; k < kQPerThread; ++k) {
    const int i = threadIdx.x + k * kThreads, h = i / (D / 8), c = 8 * (i % (D / 8));
    if constexpr (kF16) {
      float m = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) m = fmaxf(m, fabsf(qx[k][e]));
#pragma unroll
      for (int o = 1; o < D / 8; o *= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      const float factor = f16_range_factor(m);
      if (i < kQItems && c == 0) q_factor_s[h] = factor;
#pragma unroll
      for (int e = 0; e < 8; ++e) qx[k][e] *= factor;
    }
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (kLo) split<kF16>(qx[k][2 * e], qx[k][2 * e + 1], hi[e], lo[e]);
      else hi[e] = pack16<kF16>(qx[k][2 * e], qx[k][2 * e + 1]);
    }
    if (i < kQItems) {
      *reinterpret_cast<uint4*>(&q_s[0][h * P + c]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      if constexpr (kLo) *reinterpret_cast<uint4*>(&q_s[1][h * P + c]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
  }
  // Q, its factors and the first batch's pages are in shared memory.
  const bool bad = __syncthreads_or(item_bad) != 0 || w.bad;
  if (threadIdx.x == 0) bad_s = bad;

  uint16_t* k_s = reinterpret_cast<uint16_t*>(work_s + warp * kWarpBytes);  // BF16
  uint16_t* v_s = k_s + kSub * P;
  uint8_t* ring = work_s + warp * kWarpBytes;  // FP8, NVFP4
  // Fragment rows: this lane holds rows grp (r = 0) and grp + 8 (r = 1) of S, P and O.
  float o[kNTiles][4] = {};
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
  // Each row's logit factor: the per-layer K scale and NVFP4's 2^14 put back, Q's range factor
  // taken out (exact: powers of two).
  float kq[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    kq[r] = a.k_scale * kTileScale<F> * a.score_scale;
    if constexpr (kF16) kq[r] /= q_factor_s[grp + 8 * r];
  }
  // ldmatrix: lane j gives row j % 8 of matrix j / 8.
  const int a_row = (lane / 8 % 2) * 8 + lane % 8, a_col = (lane / 16) * 8;  // Q, and V (trans)
  const int b_row = (lane / 16) * 8 + lane % 8, b_col = (lane / 8 % 2) * 8;  // K

  for (int base = w.first; base < w.last; base += kItemBatch) {
    const int count = min(kItemBatch, w.last - base);
    if (base != w.first) {  // dense layers past kItemBatch blocks: the next batch's pages
      __syncthreads();      // the previous batch's list is consumed
      bool batch_bad = false;
      if (threadIdx.x < count) {
        resolve_block(a, w, item_block(a, w.t, w.g, base + threadIdx.x), page_s[threadIdx.x], keys_s[threadIdx.x],
                      batch_bad);
      }
      if (__syncthreads_or(batch_bad) && threadIdx.x == 0) bad_s = 1;
    }

    // This warp's sub-tiles, in order: (item, sub) with key0 = (4 sub + warp) 16 < keys (an
    // item without a page has no keys).
    auto next = [&](int& item, int& sub) {
      do {
        if (++sub == kSubTiles) {
          sub = 0;
          ++item;
        }
      } while (item < count && (sub * kWarps + warp) * kSub >= keys_s[item]);
    };
    auto row0_of = [&](int item, int sub, int& valid) {
      const int key0 = (sub * kWarps + warp) * kSub;
      valid = min(kSub, keys_s[item] - key0);
      return w.g * kBlockTokens + key0;
    };
    int item = 0, sub = -1;
    next(item, sub);
    if constexpr (kBf16) {
      // The next sub-tile's K is issued once this QK is done, V once this P.V is done (commit
      // groups complete in order, so wait_group 1 means "all but the newest").
      if (item < count) {
        int valid;
        const int row0 = row0_of(item, sub, valid);
        issue_bf16<D>(k_s, page_s[item] + a.k_codes, row0, valid, lane);
        issue_bf16<D>(v_s, page_s[item] + a.v_codes, row0, valid, lane);
      }
      while (item < count) {
        int next_item = item, next_sub = sub;
        next(next_item, next_sub);
        const bool more = next_item < count;
        int valid;
        row0_of(item, sub, valid);
        float s[2][4] = {};  // n-tile t: keys 8t .. 8t + 7
        cp_async_wait<1>();
        __syncwarp();
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          uint32_t qh[4], ql[4], kb[4];
          ldmatrix_x4(qh, &q_s[0][a_row * P + ks * 16 + a_col]);
          if constexpr (kLo) ldmatrix_x4(ql, &q_s[1][a_row * P + ks * 16 + a_col]);
          ldmatrix_x4(kb, &k_s[b_row * P + ks * 16 + b_col]);
          mma<kF16>(s[0], qh, kb[0], kb[1]);  // no two back-to-back MMAs into the same registers
          mma<kF16>(s[1], qh, kb[2], kb[3]);
          if constexpr (kLo) {
            mma<kF16>(s[0], ql, kb[0], kb[1]);
            mma<kF16>(s[1], ql, kb[2], kb[3]);
          }
        }
        __syncwarp();  // every lane's reads of k_s are done
        if (more) {
          int next_valid;
          const int row0 = row0_of(next_item, next_sub, next_valid);
          issue_bf16<D>(k_s, page_s[next_item] + a.k_codes, row0, next_valid, lane);
        }
        uint32_t ph[4], pl[4];
        softmax_step<kF16, kLo, kNTiles>(s, valid, kq, m, l, o, ph, pl, tig);
        if (more) cp_async_wait<1>();
        else cp_async_wait<0>();
        __syncwarp();  // V is in the tile
#pragma unroll
        for (int t = 0; t < kNTiles; t += 2) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, &v_s[a_row * P + t * 8 + a_col]);
          mma<kF16>(o[t], ph, vb[0], vb[1]);
          mma<kF16>(o[t + 1], ph, vb[2], vb[3]);
          if constexpr (kLo) {
            mma<kF16>(o[t], pl, vb[0], vb[1]);
            mma<kF16>(o[t + 1], pl, vb[2], vb[3]);
          }
        }
        __syncwarp();  // every lane's reads of v_s are done
        if (more) {
          int next_valid;
          const int row0 = row0_of(next_item, next_sub, next_valid);
          issue_bf16<D>(v_s, page_s[next_item] + a.v_codes, row0, next_valid, lane);
        }
        item = next_item;
        sub = next_sub;
      }
    } else {
      // The fetch cursor runs kRawStages - 1 sub-tiles ahead of the computation, which needs
      // only each sub-tile's visible keys: `pending` holds them, oldest first (0: none). Every
      // fetch commits one group (empty past the end), so "all but the newest kRawStages - 2
      // groups" is the oldest pending sub-tile.
      constexpr int kStages = kRawStages<F>;
      // Each lane's fetch plan is read back from shared memory for every sub-tile (one load
      // instead of the dozens of instructions ptxas spends to work it out again).
      __shared__ FragFetch<F, D> plan_s[kThreads];
      __shared__ FragReads<F, D> reads_s[kThreads];  // likewise, the lane's reads of a slot
      plan_s[threadIdx.x] = FragFetch<F, D>::of(a, w.g * kBlockTokens + warp * kSub);
      reads_s[threadIdx.x] = FragReads<F, D>::of(lane);
      auto fetch = [&](uint8_t* target) {
        int valid = 0;
        if (item < count) {
          // row0_of's count, written out: calling it changes ptxas's code for FP8 (+8 instructions).
          const int rows = sub * kWarps * kSub;  // past the warp's first sub-tile of the page
          valid = min(kSub, keys_s[item] - (rows + warp * kSub));
          const FragFetch<F, D> plan = plan_s[threadIdx.x];
          plan.issue(target, page_s[item], rows, valid);
          next(item, sub);
        }
        cp_async_commit();
        return valid;
      };
      int pending[kStages - 1];
#pragma unroll
      for (int i = 0; i < kStages - 1; ++i) pending[i] = fetch(ring + i * Slot::kBytes);
      uint8_t* slot = ring;  // step s reads slot s % kStages and refills slot (s - 1) % kStages
      while (pending[0] > 0) {
        const int valid = pending[0];
        cp_async_wait<kStages - 2>();
        __syncwarp();  // every lane's copies have landed; the previous step's slot is read
#pragma unroll
        for (int i = 0; i + 1 < kStages - 1; ++i) pending[i] = pending[i + 1];
        pending[kStages - 2] = fetch(slot == ring ? ring + (kStages - 1) * Slot::kBytes : slot - Slot::kBytes);
        float s[2][4] = {};  // n-tile t: keys 8t .. 8t + 7
        const FragReads<F, D> reads = reads_s[threadIdx.x];
        qk_from_slot<F, D, kLo>(s, q_s[0], q_s[kLo ? 1 : 0], slot, reads, lane);
        uint32_t ph[4], pl[4];
        softmax_step<kF16, kLo, kNTiles>(s, valid, kq, m, l, o, ph, pl, tig);
        pv_from_slot<F, D, kLo>(o, ph, pl, slot + Slot::kPlane, reads);
        slot = slot == ring + (kStages - 1) * Slot::kBytes ? ring : slot + Slot::kBytes;
      }
      cp_async_wait<0>();  // the empty groups past the end
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
  float* o_s = reinterpret_cast<float*>(work_s);  // [kWarps][kRows][P]
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
  // A row's four weights and its end (the output scale, the log-sum-exp) depend on the row only:
  // one thread a row works them out once, instead of every thread for each of its D / 8 outputs
  // of that row (at one token, where a warp runs alone on its scheduler, that loop was about a
  // third of a warp's instructions). The same operations in the same order as before.
  __shared__ float weight_s[kRows][kWarps], scale_s[kRows];
  if (threadIdx.x < a.group) {
    const int h = threadIdx.x;
    float top = neg_inf();
#pragma unroll
    for (int v = 0; v < kWarps; ++v) top = fmaxf(top, ml_s[v][h][0]);
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) {
      const float f = weight(ml_s[v][h][0], top);
      weight_s[h][v] = f;
      sum = fmaf(ml_s[v][h][1], f, sum);
    }
    const RowEnd end = row_end(a, w, top, sum, a.v_scale * kTileScale<F>);
    scale_s[h] = end.scale;
    store_lse(a, w, h, end.lse);
  }
  __syncthreads();
  // Thread i writes output column i % D of rows i / D, i / D + kThreads / D, ...: its dimension
  // (pv_dim) and the group's first row are worked out once. Rows of a group are D apart. The
  // loop runs over the MMA's rows, a constant, so that its shared-memory reads are issued
  // together rather than each row's after the row before has been stored: with few CTAs (one to
  // eight tokens) this loop's latency is on the kernel's critical path.
  static_assert(kThreads % D == 0, "a thread keeps one column");
  const int d = threadIdx.x % D, dim = kBf16 ? d : pv_dim<F, D>(d);
  float* const out = out_ptr(a, w, 0) + dim;
#pragma unroll
  for (int h = threadIdx.x / D; h < kRows; h += kThreads / D) {
    if (h < a.group) {  // padding rows are not written
      float acc = 0.0f;
#pragma unroll
      for (int v = 0; v < kWarps; ++v) acc = fmaf(o_s[(v * kRows + h) * P + d], weight_s[h][v], acc);
      out[h * D] = acc * scale_s[h];
    }
  }
}

template <KvFormat F, int D, bool kLo>
cudaError_t launch_or_count(const AttentionArgs& a, cudaStream_t stream, int* ctas_per_sm) {
  if (ctas_per_sm != nullptr) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, attention_tensor_core<F, D, kLo>, kThreads, 0);
  }
  attention_tensor_core<F, D, kLo><<<dim3(a.tokens, a.kv_heads, a.splits), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template <KvFormat F, int D>
cudaError_t launch_or_count(const AttentionArgs& a, cudaStream_t stream, int* ctas_per_sm) {
  return a.operands_16bit ? launch_or_count<F, D, false>(a, stream, ctas_per_sm)
                          : launch_or_count<F, D, true>(a, stream, ctas_per_sm);
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
