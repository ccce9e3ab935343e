// Paged attention for steps with many query tokens per sequence (prefill chunks), tensor cores,
// BF16, FP8 and NVFP4 pages. Design and numerics: docs/kernels/attention_prefill.md.
//
// The decode kernel gives every query token its own CTAs, so a prefill chunk of T tokens reads
// each visible page T times. Here one CTA of 4 warps takes 4 consecutive tokens of the step and
// one KV head, warp w owning token w (its group's heads are the MMA's 16 rows). The CTA walks
// the union of the 4 tokens' blocks in (sequence, block) order, a merge of their sorted block
// lists; each block is staged into shared memory once, in 64-key units (each warp stages one
// 16-key sub-tile, so the staging reuses the decode kernel's raw slots and dequantization), and
// every warp whose token reads the block computes on it. Tokens of one chunk share nearly all
// their blocks, so the pages are read about once per 4 tokens.
//
// The arithmetic per key is the decode kernel's: Q and P split into hi + lo of the tile's type
// (FP16 for FP8 and NVFP4 pages, Q scaled per head into range), or one 16-bit operand each
// with AttentionOperands::k16Bit (a uniform branch skips the lo MMAs), FP32 accumulation, online
// softmax in base 2, the per-layer scales applied to the FP32 scores and outputs. So the decode
// kernel's derived error bound holds unchanged; only the order of the sums differs.
#include <cuda_runtime.h>

#include <climits>

#include "backend/cuda/paged_attention_device.cuh"
#include "backend/cuda/paged_attention_launch.h"
#include "backend/cuda/paged_attention_mma.cuh"

namespace fp4::cuda::detail {
namespace {

using namespace tc;

constexpr int kThreads = kAttentionThreads;
constexpr int kWarps = kThreads / 32;  // one query token per warp
constexpr int kRows = 16;              // the group's query heads: the MMA's M
constexpr int kUnit = kWarps * kSub;   // keys staged at once: one 16-key sub-tile per warp
constexpr int kRounds = 32;            // blocks of the merge planned at once

// One block of the merge: the page, the warps (tokens) that read it and how many of its keys
// each of them sees.
struct Round {
  int64_t page_offset;  // into the pool; -1: an invalid page, skipped
  int seq, block;
  int mask;             // bit w: warp w's token reads this block
  int valid[kWarps];    // visible keys of the block per warp (0 where its bit is clear)
  int max_valid;        // the most any of them sees: the units to stage
};

// Shared memory of one CTA (dynamic; offsets in bytes). Q as hi and lo per warp, then the
// staging: BF16 pages go by cp.async straight into double-buffered K and V tiles; FP8 and
// NVFP4 pages into double-buffered raw slots (one per warp, the decode kernel's RawSlot), from
// which each warp dequantizes its sub-tile into the one K and V tile.
template <KvFormat F, int D>
struct Smem {
  static constexpr bool kBf16 = F == KvFormat::kBF16;
  static constexpr int P = D + 8;
  static constexpr int kTile = kUnit * P * 2;
  static constexpr int kQ = kWarps * 2 * kRows * P * 2;
  static constexpr int kStage = kBf16 ? 2 * kTile : kWarps * RawSlot<F, D>::kBytes;
  static constexpr int kStages = 2;
  static constexpr int kTilesAt = kQ + kStages * kStage;
  static constexpr int kBytes = kTilesAt + (kBf16 ? 0 : 2 * kTile);
};

// The merge's state and plan, static shared memory.
struct Plan {
  Round rounds[kRounds];
  int count;
  // Sparse: each warp's block ids, ascending. Rows start 16-byte aligned: the rank sort's
  // vector loads would otherwise take the int before a warp's row, the previous warp's last
  // entry, while that warp writes it (a race on a value never used, but a race).
  alignas(16) int selection[kWarps][kMaxPrefillSelection];
  int cursor[kWarps], end[kWarps];              // the next list entry and the list's end
  int seq[kWarps], pos[kWarps];
  int live;                                     // warps with a token still to read blocks
  int bad;                                      // warps whose token must come out NaN
  float q_factor[kWarps][kRows];
};

// Warp `warp` sets up its token: position, sequence, block list (dense: 0 .. pos / 128;
// sparse: the selection sorted ascending, padding first and skipped), and what the CPU reference
// would reject marks the warp bad.
__device__ void load_token(const AttentionArgs& a, Plan& plan, int warp, int lane, int t, int g) {
  const bool here = t < a.tokens;
  int pos = -1, seq = -1;
  bool bad = false;
  if (here) {
    pos = a.positions[t];
    seq = a.seq_of_token[t];
    bad = pos < 0 || seq < 0 || seq >= a.num_seqs;
  }
  const int own = pos / kBlockTokens;
  int first = 0, end = 0;
  if (here && !bad && a.selected == nullptr) {
    end = own + 1;
    bad = own >= a.max_blocks;
  } else if (here && !bad) {
    const int32_t* list = a.selected + (int64_t{g} * a.tokens + t) * a.topk;
    int x[kMaxPrefillSelection / 32];
#pragma unroll
    for (int j = 0; j < kMaxPrefillSelection / 32; ++j) {
      const int i = lane + 32 * j;
      x[j] = i < a.topk ? list[i] : INT_MAX;
      if (i < a.topk && (x[j] > own || x[j] >= a.max_blocks)) bad = true;
      plan.selection[warp][i] = x[j];
    }
    bad = __any_sync(0xffffffffu, bad);
    __syncwarp();
    // Rank sort (stable, so equal ids, counted twice as the reference counts them, stay apart).
    int rank[kMaxPrefillSelection / 32], negative = 0;
#pragma unroll
    for (int j = 0; j < kMaxPrefillSelection / 32; ++j) {
      const int i = lane + 32 * j;
      rank[j] = 0;
      for (int k = 0; k < a.topk; ++k) {
        const int y = plan.selection[warp][k];
        rank[j] += y < x[j] || (y == x[j] && k < i);
      }
      negative += i < a.topk && x[j] < 0;
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kMaxPrefillSelection / 32; ++j) {
      if (lane + 32 * j < a.topk) plan.selection[warp][rank[j]] = x[j];
    }
    first = __reduce_add_sync(0xffffffffu, negative);
    end = a.topk;
  }
  if (lane == 0) {
    plan.cursor[warp] = first;
    plan.end[warp] = end;
    plan.seq[warp] = seq;
    plan.pos[warp] = pos;
    if (bad) atomicOr(&plan.bad, 1 << warp);
    if (here && !bad && first < end) atomicOr(&plan.live, 1 << warp);
  }
}

// Warp 0: the next rounds of the merge (lane 0 runs it, on shared memory only), then the
// rounds' pages resolved in parallel, one block-table read per lane.
__device__ void plan_rounds(const AttentionArgs& a, Plan& plan, int lane) {
  if (lane == 0) {
    int n = 0;
    for (; n < kRounds; ++n) {
      int64_t key[kWarps], best = LLONG_MAX;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        key[w] = LLONG_MAX;
        if (!(plan.live >> w & 1) || (plan.bad >> w & 1)) continue;
        const int c = plan.cursor[w];
        const int block = a.selected == nullptr ? c : plan.selection[w][c];
        key[w] = int64_t{plan.seq[w]} << 32 | block;
        best = min(best, key[w]);
      }
      if (best == LLONG_MAX) break;
      Round& r = plan.rounds[n];
      r.seq = static_cast<int>(best >> 32);
      r.block = static_cast<int>(best & 0xffffffff);
      r.mask = 0;
      r.max_valid = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        r.valid[w] = 0;
        if (key[w] != best) continue;
        r.mask |= 1 << w;
        r.valid[w] = min(kBlockTokens, plan.pos[w] + 1 - r.block * kBlockTokens);
        r.max_valid = max(r.max_valid, r.valid[w]);
        if (++plan.cursor[w] == plan.end[w]) plan.live &= ~(1 << w);
      }
    }
    plan.count = n;
  }
  __syncwarp();
  if (lane < plan.count) {
    Round& r = plan.rounds[lane];
    const int page = a.block_tables[int64_t{r.seq} * a.max_blocks + r.block];
    if (page < 0 || page >= a.num_pages) {
      r.page_offset = -1;
      atomicOr(&plan.bad, r.mask);
    } else {
      r.page_offset = int64_t{page} * a.page_bytes;
    }
  }
}

// Copies of unit `half` (keys [64 half, 64 half + 64)) of round r's block: this warp's 16 rows
// of K and V into stage buffer `stage`, zero-filled past the most keys any reader sees.
template <KvFormat F, int D>
__device__ __forceinline__ void issue_unit(const AttentionArgs& a, const Round& r, int half, int g,
                                           uint8_t* stage, int warp, int lane) {
  using S = Smem<F, D>;
  const int key0 = half * kUnit + warp * kSub;
  const int valid = max(0, min(kSub, r.max_valid - key0));
  const uint8_t* page = a.pool + r.page_offset;
  const int row0 = g * kBlockTokens + key0;
  if constexpr (S::kBf16) {
    constexpr int kVecsPerRow = D / 8;
#pragma unroll
    for (int kv = 0; kv < 2; ++kv) {
      uint16_t* tile = reinterpret_cast<uint16_t*>(stage + kv * S::kTile) + warp * kSub * S::P;
      const uint8_t* region = page + (kv == 0 ? a.k_codes : a.v_codes);
#pragma unroll
      for (int i = lane; i < kSub * kVecsPerRow; i += 32) {
        const int key = i / kVecsPerRow, piece = i % kVecsPerRow;
        cp_async16(tile + key * S::P + piece * 8, region + (row0 + key) * int64_t{2 * D} + piece * 16, key < valid);
      }
    }
  } else {
    issue_raw<F, D>(stage + warp * RawSlot<F, D>::kBytes, a, page, row0, valid, lane);
  }
}

template <KvFormat F, int D>
__global__ void __launch_bounds__(kThreads, 2) attention_prefill(const AttentionArgs a) {
  using S = Smem<F, D>;
  constexpr bool kBf16 = S::kBf16, kF16 = !kBf16;
  constexpr int P = S::P, kKSteps = D / 16, kNTiles = D / 8;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ Plan plan;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, grp = lane / 4, tig = lane % 4;
  const int g = blockIdx.y, t = blockIdx.x * kWarps + warp;
  if (threadIdx.x == 0) {
    plan.live = 0;
    plan.bad = 0;
  }
  __syncthreads();
  load_token(a, plan, warp, lane, t, g);
  const bool has_token = t < a.tokens;

  // This warp's Q as hi + lo in the tiles' type and column order (as the decode kernel).
  uint16_t* q_hi = reinterpret_cast<uint16_t*>(smem) + warp * 2 * kRows * P;
  uint16_t* q_lo = q_hi + kRows * P;
  const float* q = a.q + (int64_t{t} * a.q_heads + int64_t{g} * a.group) * D;
  for (int h = 0; h < kRows; ++h) {
    float m = 0.0f;
    if (kF16 && has_token && h < a.group) {
      for (int d = lane; d < D; d += 32) m = fmaxf(m, fabsf(__ldg(q + h * D + d)));
    }
    m = warp_max(m);
    if (lane == 0) plan.q_factor[warp][h] = kF16 ? f16_range_factor(m) : 1.0f;
  }
  __syncwarp();
  for (int i = lane; i < kRows * D / 8; i += 32) {
    const int h = i / (D / 8), c = 8 * (i % (D / 8));
    float x[8] = {};
    if (has_token && h < a.group) {
      const float4* row = reinterpret_cast<const float4*>(q + h * D + c);
      const float4 lo4 = __ldg(row), hi4 = __ldg(row + 1);
      const float in[8] = {lo4.x, lo4.y, lo4.z, lo4.w, hi4.x, hi4.y, hi4.z, hi4.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = in[kv_dim<F>(e)] * plan.q_factor[warp][h];
    }
    uint32_t hi[4], lo[4] = {};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (a.operands_16bit) hi[e] = pack16<kF16>(x[2 * e], x[2 * e + 1]);
      else split<kF16>(x[2 * e], x[2 * e + 1], hi[e], lo[e]);
    }
    *reinterpret_cast<uint4*>(&q_hi[h * P + c]) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    *reinterpret_cast<uint4*>(&q_lo[h * P + c]) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  }

  float o[kNTiles][4] = {};
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f}, kq[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    kq[r] = a.k_scale * kTileScale<F> * a.score_scale / plan.q_factor[warp][grp + 8 * r];
  }
  const int a_row = (lane / 8 % 2) * 8 + lane % 8, a_col = (lane / 16) * 8;  // Q, and V (trans)
  const int b_row = (lane / 16) * 8 + lane % 8, b_col = (lane / 8 % 2) * 8;  // K
  uint8_t* stages = smem + S::kQ;
  uint16_t* k_tile = reinterpret_cast<uint16_t*>(smem + S::kTilesAt);
  uint16_t* v_tile = k_tile + kUnit * P;

  for (;;) {
    __syncthreads();  // the tokens are loaded; the previous rounds are done with
    if (warp == 0) plan_rounds(a, plan, lane);
    __syncthreads();
    const int count = plan.count;
    if (count == 0) break;
    const int bad = plan.bad;
    // The units of this plan in order: (round, half), rounds whose page is invalid or whose
    // readers are all bad skipped.
    auto usable = [&](int r) { return plan.rounds[r].page_offset >= 0 && (plan.rounds[r].mask & ~bad) != 0; };
    auto advance = [&](int& r, int& half) {
      if (r >= 0 && (half + 1) * kUnit < plan.rounds[r].max_valid) {
        ++half;
        return;
      }
      half = 0;
      for (++r; r < count && !usable(r); ++r) {}
    };
    int r = -1, half = 0;
    advance(r, half);
    if (r < count) issue_unit<F, D>(a, plan.rounds[r], half, g, stages, warp, lane);
    cp_async_commit();
    for (int u = 0; r < count; ++u) {
      int next_r = r, next_half = half;
      advance(next_r, next_half);
      if (next_r < count) {
        issue_unit<F, D>(a, plan.rounds[next_r], next_half, g, stages + (u + 1) % 2 * S::kStage, warp, lane);
      }
      cp_async_commit();
      cp_async_wait<1>();  // this unit's copies (this thread's) have landed
      const Round& round = plan.rounds[r];
      uint8_t* stage = stages + u % 2 * S::kStage;
      if constexpr (!kBf16) {
        __syncwarp();  // every lane's copies of this warp's slot
        const uint8_t* slot = stage + warp * RawSlot<F, D>::kBytes;
        const int valid = max(0, min(kSub, round.max_valid - half * kUnit - warp * kSub));
        // land_plane masks every sub-tile, full ones too: a dispatch on `valid == kSub` over
        // this clamped count was miscompiled (land_plane's comment). issue_raw now zero-fills
        // partial NVFP4 scale chunks too, so the rows past `valid` are zeros either way.
        land_plane<F, D>(slot, k_tile + warp * kSub * P, valid, lane);
        land_plane<F, D>(slot + RawSlot<F, D>::kPlane, v_tile + warp * kSub * P, valid, lane);
      }
      __syncthreads();  // the unit's K and V tiles are complete
      const uint16_t* k_s = kBf16 ? reinterpret_cast<const uint16_t*>(stage) : k_tile;
      const uint16_t* v_s = kBf16 ? k_s + kUnit * P : v_tile;
      // Keys of this unit the warp's token sees (warp-uniform).
      const int visible = (round.mask >> warp & 1) && !(bad >> warp & 1) ? round.valid[warp] - half * kUnit : 0;
      if (visible > 0) {
        const int groups = min(kUnit / 16, (visible + 15) / 16);  // 16-key groups with a visible key
        float s[kUnit / 8][4] = {};
        // Each k-step issues the Q hi products of every key group, then the Q lo ones, so that
        // back-to-back MMAs never accumulate into the same registers.
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          uint32_t qh[4], ql[4], kb[kUnit / 16][4];
          ldmatrix_x4(qh, &q_hi[a_row * P + ks * 16 + a_col]);
          ldmatrix_x4(ql, &q_lo[a_row * P + ks * 16 + a_col]);
#pragma unroll
          for (int kg = 0; kg < kUnit / 16; ++kg) {
            if (kg < groups) ldmatrix_x4(kb[kg], &k_s[(kg * 16 + b_row) * P + ks * 16 + b_col]);
          }
#pragma unroll
          for (int part = 0; part < 2; ++part) {
            if (part == 1 && a.operands_16bit) break;  // 16-bit operands: Q alone
#pragma unroll
            for (int kg = 0; kg < kUnit / 16; ++kg) {
              if (kg >= groups) break;
              mma<kF16>(s[2 * kg], part == 0 ? qh : ql, kb[kg][0], kb[kg][1]);
              mma<kF16>(s[2 * kg + 1], part == 0 ? qh : ql, kb[kg][2], kb[kg][3]);
            }
          }
        }
        float alpha[2];
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          float top = neg_inf();
#pragma unroll
          for (int nt = 0; nt < kUnit / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = nt * 8 + 2 * tig + e;
              const float x = key < visible ? s[nt][2 * rr + e] * kq[rr] : neg_inf();
              s[nt][2 * rr + e] = x;
              top = fmaxf(top, x);
            }
          }
          top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
          top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
          const float m_new = fmaxf(m[rr], top);
          alpha[rr] = rescale_factor(m[rr], m_new);
          m[rr] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int nt = 0; nt < kUnit / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float p = weight(s[nt][2 * rr + e], m_new);
              s[nt][2 * rr + e] = p;
              sum += p;
            }
          }
          l[rr] = l[rr] * alpha[rr] + sum;  // this lane's share of the row
        }
        rescale_rows<kNTiles>(o, alpha);
        // O += P V per 16-key group: V's fragments for every output tile first, then the P hi
        // products over all tiles, then the P lo ones (again no back-to-back accumulation).
#pragma unroll
        for (int kg = 0; kg < kUnit / 16; ++kg) {
          if (kg >= groups) break;
          uint32_t ph[4], pl[4];  // P of keys [16 kg, 16 kg + 16) as an A fragment
#pragma unroll
          for (int rr = 0; rr < 2; ++rr) {
            if (a.operands_16bit) {
              ph[rr] = pack16<kF16>(s[2 * kg][2 * rr], s[2 * kg][2 * rr + 1]);
              ph[2 + rr] = pack16<kF16>(s[2 * kg + 1][2 * rr], s[2 * kg + 1][2 * rr + 1]);
            } else {
              split<kF16>(s[2 * kg][2 * rr], s[2 * kg][2 * rr + 1], ph[rr], pl[rr]);
              split<kF16>(s[2 * kg + 1][2 * rr], s[2 * kg + 1][2 * rr + 1], ph[2 + rr], pl[2 + rr]);
            }
          }
          uint32_t vb[kNTiles / 2][4];
#pragma unroll
          for (int nt = 0; nt < kNTiles; nt += 2) ldmatrix_x4_trans(vb[nt / 2], &v_s[(kg * 16 + a_row) * P + nt * 8 + a_col]);
#pragma unroll
          for (int part = 0; part < 2; ++part) {
            if (part == 1 && a.operands_16bit) break;  // 16-bit operands: P alone
#pragma unroll
            for (int nt = 0; nt < kNTiles; nt += 2) {
              mma<kF16>(o[nt], part == 0 ? ph : pl, vb[nt / 2][0], vb[nt / 2][1]);
              mma<kF16>(o[nt + 1], part == 0 ? ph : pl, vb[nt / 2][2], vb[nt / 2][3]);
            }
          }
        }
      }
      __syncthreads();  // every warp is done with the tiles and this stage
      r = next_r;
      half = next_half;
    }
    cp_async_wait<0>();  // the empty group past the end
  }

  if (!has_token) return;
  // One split: no key at all gives 0 * (v_scale / 0) = NaN, as the CPU's 0 / 0.
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
  }
  const bool bad = plan.bad >> warp & 1;
  float* out = a.out + (int64_t{t} * a.q_heads + int64_t{g} * a.group) * D;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int h = grp + 8 * rr;
    if (h >= a.group) continue;
    const float scale = bad ? nan_f32() : a.v_scale * kTileScale<F> / l[rr];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) out[h * D + kv_dim<F>(nt * 8 + 2 * tig + e)] = o[nt][2 * rr + e] * scale;
    }
  }
}

template <KvFormat F, int D>
cudaError_t launch_or_count(const AttentionArgs& a, cudaStream_t stream, int* ctas_per_sm) {
  constexpr int kBytes = Smem<F, D>::kBytes;
  cudaError_t status =
      cudaFuncSetAttribute(attention_prefill<F, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (status != cudaSuccess) return status;
  if (ctas_per_sm != nullptr) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, attention_prefill<F, D>, kThreads, kBytes);
  }
  const dim3 grid((a.tokens + kWarps - 1) / kWarps, a.kv_heads);
  attention_prefill<F, D><<<grid, kThreads, kBytes, stream>>>(a);
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
  if (a.splits != 1 || (a.selected != nullptr && a.topk > kMaxPrefillSelection)) return cudaErrorInvalidValue;
  switch (a.format) {
    case KvFormat::kBF16: return launch_or_count<KvFormat::kBF16>(a, stream, ctas_per_sm);
    case KvFormat::kFP8: return launch_or_count<KvFormat::kFP8>(a, stream, ctas_per_sm);
    case KvFormat::kNVFP4: return launch_or_count<KvFormat::kNVFP4>(a, stream, ctas_per_sm);
    case KvFormat::kF32: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_attention_prefill(const AttentionArgs& a, cudaStream_t stream) {
  return launch_or_count(a, stream, nullptr);
}

cudaError_t prefill_ctas_per_sm(const AttentionArgs& a, int* ctas) {
  return launch_or_count(a, nullptr, ctas);
}

}  // namespace fp4::cuda::detail
