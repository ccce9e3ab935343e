// The decode kernel's FP8 and NVFP4 operands, built in registers straight from a warp's raw
// slot: K as the B fragments of S = Q K^T, V as the B fragments of O += P V. No FP16 tile is
// written to shared memory and read back by ldmatrix (the prefill kernel still does that, through
// land_plane).
//
// A dot product is a sum, so the kernel may permute head_dim as it likes when Q (A of QK) is
// staged in the same order; P V's output columns are mapped back to dimensions at the end. The
// permutations are chosen so that each lane reads whole runs of its own rows:
// - K: lane (grp, tig) holds key 8t + grp of n-tile t, and over all k-steps the run
//   [tig D/4, (tig + 1) D/4) of that key's dimensions (16 bytes of an NVFP4 row at head_dim 128);
// - V: lane (grp, tig) holds keys 2 tig, 2 tig + 1, 2 tig + 8, 2 tig + 9 (the MMA's k rows), and
//   over all n-tiles the run [grp D/8, (grp + 1) D/8) of their dimensions (8 NVFP4 bytes, one
//   block scale per key). The B fragment pairs two keys at one dimension: the two keys' code
//   bytes are interleaved by one prmt before the expansion, which then yields the pairs.
// Keys stay in their natural order, so S's columns, P and the row masking are unchanged.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/mma.cuh"
#include "backend/cuda/paged_attention_mma.cuh"

namespace fp4::cuda::detail::tc {

// A raw slot read by fragments: RawSlot's regions with another chunk placement. At head_dim 128
// the chunks are XOR-swizzled within each 128-byte line so that both read patterns are free of
// bank conflicts: K's 16-byte reads (8 lanes: two keys x four chunks) and V's 8-byte (NVFP4) or
// 16-byte (FP8) reads (four keys 2 apart x the lanes' runs). Other head sizes keep the plain
// order (correct, not tuned).
template <KvFormat F, int D>
struct FragSlot : RawSlot<F, D> {
  static __host__ __device__ constexpr int chunk(int key, int piece) {
    const int p = key * RawSlot<F, D>::kVecsPerRow + piece;
    if constexpr (D != 128) return p;
    else if constexpr (F == KvFormat::kNVFP4) return p ^ (2 * ((key >> 1) & 3));  // 4 chunks a row
    else return p ^ (key & 7);                                                    // 8 chunks a row
  }
};

// The copies that fill a FragSlot with 16 rows of K and V, as issue_raw makes them. What stays
// the same from one sub-tile to the next is worked out once: the lane's chunk positions in the
// slot (lane i copies chunks i, i + 32, ... of each region) and its byte offsets in a page of
// its first K code chunk and K scale chunk at row `first_row` (the warp's first rows of its KV
// head). A sub-tile then costs its page pointer, its rows past first_row and its visible keys,
// instead of each region's address worked out from the page's offset and the row anew. An
// aggregate, so that a kernel can keep each lane's in shared memory: at the decode kernel's
// register budget ptxas would otherwise work it out again for every sub-tile.
template <KvFormat F, int D>
struct FragFetch {
  using Slot = FragSlot<F, D>;
  static constexpr int kCodeChunks = Slot::kCodes / 16, kScaleChunks = Slot::kScales / 16;
  static constexpr int kPerLane = (kCodeChunks + 31) / 32;
  static constexpr int kRowsPerPass = 32 / Slot::kVecsPerRow;  // rows one pass of 32 chunks covers
  static_assert(kCodeChunks % 32 == 0 || kCodeChunks < 32, "whole passes, or one partial pass");
  static_assert(kScaleChunks <= 32, "one pass of scale chunks");
  // The swizzle repeats every 8 rows, so passes kDistinct apart land at a fixed distance.
  static constexpr int kDistinct = kPerLane < 8 / kRowsPerPass ? kPerLane : (kRowsPerPass >= 8 ? 1 : 8 / kRowsPerPass);
  int dst[kDistinct];  // byte offsets within a plane of the lane's first kDistinct code chunks
  // Byte offsets in a page (the launcher keeps pages under 2 GiB): this lane's first chunk of K
  // codes and of K scales at first_row, and how far V's regions sit past K's.
  int code_offset, scale_offset, v_codes_past_k, v_scales_past_k;

  static __device__ __forceinline__ FragFetch of(const AttentionArgs& a, int first_row) {
    const int lane = threadIdx.x % 32;
    FragFetch f;
#pragma unroll
    for (int i = 0; i < kDistinct; ++i) {
      f.dst[i] = 16 * Slot::chunk(lane / Slot::kVecsPerRow + kRowsPerPass * i, lane % Slot::kVecsPerRow);
    }
    f.code_offset = static_cast<int>(a.k_codes) + first_row * Slot::kRowBytes + 16 * lane;
    f.scale_offset = static_cast<int>(a.k_scales) + first_row * Slot::kScaleRowBytes + 16 * lane;
    f.v_codes_past_k = static_cast<int>(a.v_codes - a.k_codes);
    f.v_scales_past_k = static_cast<int>(a.v_scales - a.k_scales);
    return f;
  }
  __device__ __forceinline__ int dst_of(int i) const {
    return dst[i % kDistinct] + (i / kDistinct) * kDistinct * kRowsPerPass * Slot::kRowBytes;
  }

  // Rows [first_row + rows, first_row + rows + 16) of `page`; not committed. Rows at or past
  // `valid` (counted from the sub-tile's first) are zero-filled, codes and scales.
  __device__ __forceinline__ void issue(uint8_t* slot, const uint8_t* page, int rows, int valid) const {
    const int lane = threadIdx.x % 32, row = lane / Slot::kVecsPerRow;  // row of the lane's first chunk
    const uint8_t* k_codes = page + (code_offset + rows * Slot::kRowBytes);
#pragma unroll
    for (int kv = 0; kv < 2; ++kv) {
      uint8_t* plane = slot + kv * Slot::kPlane;
      const uint8_t* codes = kv == 0 ? k_codes : k_codes + v_codes_past_k;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        if (kCodeChunks >= 32 || lane < kCodeChunks) {
          cp_async16(plane + dst_of(i), codes + 512 * i, row + kRowsPerPass * i < valid);
        }
      }
    }
    if constexpr (Slot::kFp4) {
      if (lane < kScaleChunks) {
        const uint8_t* k_scales = page + (scale_offset + rows * Slot::kScaleRowBytes);
        const int bytes = min(16, max(0, valid * Slot::kScaleRowBytes - 16 * lane));
        cp_async16_prefix(slot + Slot::kCodes + 16 * lane, k_scales, bytes);
        cp_async16_prefix(slot + Slot::kPlane + Slot::kCodes + 16 * lane, k_scales + v_scales_past_k, bytes);
      }
    }
  }
};

// dst_of's shortcut, checked for every lane and pass against FragSlot::chunk.
template <KvFormat F, int D>
constexpr bool frag_fetch_offsets_hold() {
  using Fetch = FragFetch<F, D>;
  using Slot = FragSlot<F, D>;
  for (int lane = 0; lane < 32; ++lane) {
    const int row = lane / Slot::kVecsPerRow, piece = lane % Slot::kVecsPerRow;
    for (int i = 0; i < Fetch::kPerLane; ++i) {
      const int first = Slot::chunk(row + Fetch::kRowsPerPass * (i % Fetch::kDistinct), piece);
      const int shortcut = 16 * first + (i / Fetch::kDistinct) * Fetch::kDistinct * Fetch::kRowsPerPass * Slot::kRowBytes;
      if (shortcut != 16 * Slot::chunk(row + Fetch::kRowsPerPass * i, piece)) return false;
    }
  }
  return true;
}
static_assert(frag_fetch_offsets_hold<KvFormat::kNVFP4, 32>() && frag_fetch_offsets_hold<KvFormat::kNVFP4, 64>() &&
              frag_fetch_offsets_hold<KvFormat::kNVFP4, 128>() && frag_fetch_offsets_hold<KvFormat::kFP8, 32>() &&
              frag_fetch_offsets_hold<KvFormat::kFP8, 64>() && frag_fetch_offsets_hold<KvFormat::kFP8, 128>());

// N bytes (4, 8, 16 or 32; aligned) as words; N < 4 reads a 16-bit value into the low half.
template <int N>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t* w) {
  if constexpr (N >= 16) {
#pragma unroll
    for (int i = 0; i < N / 16; ++i) {
      const uint4 v = *reinterpret_cast<const uint4*>(p + 16 * i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (N == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  } else if constexpr (N == 4) {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  } else {
    w[0] = *reinterpret_cast<const uint16_t*>(p);
  }
}

// The head_dim permutation of K (and Q): dimension held at column `col` of QK's k axis
// (k-step col / 16, index col % 16 within it). Lane tig = (col % 8) / 2 holds it; `half`
// (col % 16 / 8) selects the MMA's b0 or b1 register and `e` the pair's element.
template <KvFormat F, int D>
__host__ __device__ constexpr int qk_dim(int col) {
  const int ks = col / 16, kk = col % 16, tig = kk % 8 / 2, half = kk / 8, e = kk % 2;
  // NVFP4: word ks / 2 of the lane's run gives k-steps 2j (values 0, 2 | 4, 6) and 2j + 1 (1, 3 |
  // 5, 7), e2m1x8_to_f16x2_permuted's order. FP8: word ks gives values 0, 1 | 2, 3.
  if constexpr (F == KvFormat::kNVFP4) return tig * (D / 4) + 8 * (ks / 2) + 4 * half + 2 * e + ks % 2;
  else return tig * (D / 4) + 4 * ks + 2 * half + e;
}

// An aligned group of 8 columns of qk_dim is its first column's dimension plus the group's own
// pattern: qk_dim(8j + e) = qk_dim(8j) + qk_dim(e). So a thread staging the group reads one base
// address at constant offsets.
template <KvFormat F, int D>
constexpr bool qk_dim_splits() {
  for (int c = 0; c < D; c += 8) {
    for (int e = 0; e < 8; ++e) {
      if (qk_dim<F, D>(c + e) != qk_dim<F, D>(c) + qk_dim<F, D>(e)) return false;
    }
  }
  return true;
}
static_assert(qk_dim_splits<KvFormat::kNVFP4, 32>() && qk_dim_splits<KvFormat::kNVFP4, 64>() &&
              qk_dim_splits<KvFormat::kNVFP4, 128>() && qk_dim_splits<KvFormat::kFP8, 32>() &&
              qk_dim_splits<KvFormat::kFP8, 64>() && qk_dim_splits<KvFormat::kFP8, 128>());

// The dimension held at column `col` of P V's output (n-tile col / 8, column col % 8 = the grp
// of the lanes that loaded it).
template <KvFormat F, int D>
__host__ __device__ constexpr int pv_dim(int col) {
  const int t = col / 8, c = col % 8;
  // NVFP4: interleaved word j of the run's bytes 4j .. 4j + 3 yields dimensions 0, 2, 1, 3 (its
  // low bytes), then 4, 6, 5, 7, of the 8 the word covers.
  if constexpr (F == KvFormat::kNVFP4) {
    const int p = t % 8;
    return c * (D / 8) + 8 * (t / 8) + (p < 4 ? (p % 2) * 2 + p / 2 : 4 + (p % 2) * 2 + (p - 4) / 2);
  } else {
    return c * (D / 8) + t;
  }
}

// Whether qk_dim and pv_dim are permutations of [0, D): every dimension is used exactly once.
template <KvFormat F, int D>
constexpr bool frag_dims_are_permutations() {
  bool qk[D] = {}, pv[D] = {};
  for (int c = 0; c < D; ++c) {
    const int a = qk_dim<F, D>(c), b = pv_dim<F, D>(c);
    if (a < 0 || a >= D || qk[a] || b < 0 || b >= D || pv[b]) return false;
    qk[a] = pv[b] = true;
  }
  return true;
}
static_assert(frag_dims_are_permutations<KvFormat::kNVFP4, 32>() && frag_dims_are_permutations<KvFormat::kNVFP4, 64>() &&
              frag_dims_are_permutations<KvFormat::kNVFP4, 128>() && frag_dims_are_permutations<KvFormat::kFP8, 32>() &&
              frag_dims_are_permutations<KvFormat::kFP8, 64>() && frag_dims_are_permutations<KvFormat::kFP8, 128>());

// This lane's reads of a FragSlot plane as byte offsets, worked out once per CTA so that a
// sub-tile's reads cost the slot's address plus constants. K: key grp's run (second n-tile:
// keys 8 further on); V: keys 2 tig + e's runs (the MMA's second k rows: 8 further on); NVFP4:
// the block scales those runs need. An aggregate, kept in shared memory like FragFetch.
template <KvFormat F, int D>
struct FragReads {
  using Slot = FragSlot<F, D>;
  static constexpr int kKRun = Slot::kRowBytes / 4, kVRun = Slot::kRowBytes / 8;
  static constexpr int kKReads = kKRun > 16 ? kKRun / 16 : 1;  // reads of at most 16 bytes
  static constexpr int kPlus8Keys = 8 * Slot::kRowBytes;       // the same read, keys 8 on
  static constexpr int kPlus8Scales = 8 * Slot::kScaleRowBytes;
  int k_code[kKReads], v_code[2];
  int k_scale, v_scale;  // NVFP4

  static __device__ __forceinline__ FragReads of(int lane) {
    const int grp = lane / 4, tig = lane % 4;
    FragReads r;
#pragma unroll
    for (int i = 0; i < kKReads; ++i) r.k_code[i] = code_offset(grp, tig * kKRun + 16 * i);
#pragma unroll
    for (int e = 0; e < 2; ++e) r.v_code[e] = code_offset(2 * tig + e, grp * kVRun);
    r.k_scale = Slot::kCodes + grp * Slot::kScaleRowBytes + tig * (D / 4) / 16;
    r.v_scale = Slot::kCodes + 2 * tig * Slot::kScaleRowBytes + grp * (D / 8) / 16;
    return r;
  }
  static __host__ __device__ constexpr int code_offset(int key, int offset) {
    return 16 * Slot::chunk(key, offset / 16) + offset % 16;
  }
  // Whether every read of keys 8 on lies kPlus8Keys further, as the readers assume.
  static constexpr bool plus8_holds() {
    for (int key = 0; key < 8; ++key) {
      for (int offset = 0; offset < Slot::kRowBytes; ++offset) {
        if (code_offset(key + 8, offset) != code_offset(key, offset) + kPlus8Keys) return false;
      }
    }
    return true;
  }
};
static_assert(FragReads<KvFormat::kNVFP4, 32>::plus8_holds() && FragReads<KvFormat::kNVFP4, 64>::plus8_holds() &&
              FragReads<KvFormat::kNVFP4, 128>::plus8_holds() && FragReads<KvFormat::kFP8, 32>::plus8_holds() &&
              FragReads<KvFormat::kFP8, 64>::plus8_holds() && FragReads<KvFormat::kFP8, 128>::plus8_holds());

// S (two n-tiles of 8 keys) += Q K^T for one sub-tile, K from the landed K plane of a FragSlot.
// q_hi and q_lo hold Q's hi and lo rows (pitch D + 8) in qk_dim's column order; without kLo
// (16-bit operands) q_hi is Q and q_lo is not read.
template <KvFormat F, int D, bool kLo>
__device__ __forceinline__ void qk_from_slot(float s[2][4], const uint16_t* q_hi, const uint16_t* q_lo,
                                             const uint8_t* plane, const FragReads<F, D>& at, int lane) {
  using Reads = FragReads<F, D>;
  constexpr int P = D + 8, kKSteps = D / 16, kRun = Reads::kKRun;
  const int a_row = (lane / 8 % 2) * 8 + lane % 8, a_col = (lane / 16) * 8;
  uint32_t raw[2][(kRun + 3) / 4];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
#pragma unroll
    for (int i = 0; i < Reads::kKReads; ++i) {
      load_words<kRun < 16 ? kRun : 16>(plane + at.k_code[i] + t * Reads::kPlus8Keys, raw[t] + 4 * i);
    }
  }
  [[maybe_unused]] uint32_t sf[2];  // NVFP4: the run's block scales as an FP16 pair (j < 2, j >= 2)
  if constexpr (F == KvFormat::kNVFP4) {
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      // The run's first block, and its second at head_dim 128 (the run is 32 values).
      const uint8_t* scales = plane + at.k_scale + t * Reads::kPlus8Scales;
      const uint32_t bytes = D == 128 ? *reinterpret_cast<const uint16_t*>(scales) : uint32_t{*scales} * 0x0101u;
      sf[t] = e4m3x2_to_f16x2(bytes);
    }
  }
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    uint32_t qh[4], ql[4], b[2][2];
    ldmatrix_x4(qh, q_hi + a_row * P + ks * 16 + a_col);
    if constexpr (kLo) ldmatrix_x4(ql, q_lo + a_row * P + ks * 16 + a_col);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      if constexpr (F == KvFormat::kNVFP4) {
        uint32_t x[4];
        e2m1x8_to_f16x2_permuted(raw[t][ks / 2], x);  // recomputed per k-step pair; folded by ptxas
        // The half of sf that holds this block's scale, as HMUL2's broadcast operand.
        if (ks / 2 < 2) {
          b[t][0] = mul_f16x2_by_half<0>(x[2 * (ks % 2)], sf[t]);
          b[t][1] = mul_f16x2_by_half<0>(x[2 * (ks % 2) + 1], sf[t]);
        } else {
          b[t][0] = mul_f16x2_by_half<1>(x[2 * (ks % 2)], sf[t]);
          b[t][1] = mul_f16x2_by_half<1>(x[2 * (ks % 2) + 1], sf[t]);
        }
      } else {
        b[t][0] = e4m3x2_to_f16x2(raw[t][ks]);
        b[t][1] = e4m3x2_to_f16x2(raw[t][ks] >> 16);
      }
    }
    mma_m16n8k16_f16(s[0], qh, b[0][0], b[0][1]);  // no two back-to-back MMAs into the same registers
    mma_m16n8k16_f16(s[1], qh, b[1][0], b[1][1]);
    if constexpr (kLo) {
      mma_m16n8k16_f16(s[0], ql, b[0][0], b[0][1]);
      mma_m16n8k16_f16(s[1], ql, b[1][0], b[1][1]);
    }
  }
}

// O (D / 8 n-tiles) += P V for one sub-tile, V from the landed V plane of a FragSlot; P is the A
// fragment as hi and lo (without kLo, P is ph alone). Rows past the visible keys are zeros in
// the slot (FragFetch's zero-fill), so they add nothing.
template <KvFormat F, int D, bool kLo>
__device__ __forceinline__ void pv_from_slot(float o[][4], const uint32_t ph[4], const uint32_t pl[4],
                                             const uint8_t* plane, const FragReads<F, D>& at) {
  using Reads = FragReads<F, D>;
  using Slot = typename Reads::Slot;
  constexpr int kRun = Reads::kVRun, kWords = (kRun + 3) / 4;
  static_assert(kRun <= 16, "one read of V's run");
  // Keys of the MMA's k rows: (2 tig, 2 tig + 1) for b0, (2 tig + 8, 2 tig + 9) for b1.
  uint32_t raw[2][2][kWords];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int e = 0; e < 2; ++e) load_words<kRun>(plane + at.v_code[e] + r * Reads::kPlus8Keys, raw[r][e]);
  }
  [[maybe_unused]] uint32_t sf[2];  // NVFP4: the two keys' block scales as an FP16 pair, per register
  if constexpr (F == KvFormat::kNVFP4) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* scales = plane + at.v_scale + r * Reads::kPlus8Scales;
      sf[r] = e4m3x2_to_f16x2(uint32_t{scales[0]} | uint32_t{scales[Slot::kScaleRowBytes]} << 8);
    }
  }
#pragma unroll
  for (int j = 0; j < kWords; ++j) {
    // Bytes 0, 1 of both keys (selector 0x5140), then bytes 2, 3 (0x7362).
#pragma unroll
    for (int h = 0; h < (kRun >= 4 ? 2 : 1); ++h) {
      uint32_t b[2][4];  // per register (b0, b1): four n-tiles' pairs
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t mixed = prmt(raw[r][0][j], raw[r][1][j], h == 0 ? 0x5140 : 0x7362);
        if constexpr (F == KvFormat::kNVFP4) {
          e2m1x8_to_f16x2_permuted(mixed, b[r]);
#pragma unroll
          for (int i = 0; i < 4; ++i) b[r][i] = mul_f16x2(b[r][i], sf[r]);
        } else {
          b[r][0] = e4m3x2_to_f16x2(mixed);
          b[r][1] = e4m3x2_to_f16x2(mixed >> 16);
        }
      }
      // NVFP4: the four pairs are n-tiles 8j + 4h + 0..3; FP8: the two are 4j + 2h + 0, 1.
      constexpr int kPairs = F == KvFormat::kNVFP4 ? 4 : 2;
#pragma unroll
      for (int i = 0; i < kPairs; ++i) {
        const int t = F == KvFormat::kNVFP4 ? 8 * j + 4 * h + i : 4 * j + 2 * h + i;
        mma_m16n8k16_f16(o[t], ph, b[0][i], b[1][i]);
      }
#pragma unroll
      for (int i = 0; i < (kLo ? kPairs : 0); ++i) {
        const int t = F == KvFormat::kNVFP4 ? 8 * j + 4 * h + i : 4 * j + 2 * h + i;
        mma_m16n8k16_f16(o[t], pl, b[0][i], b[1][i]);
      }
    }
  }
}

}  // namespace fp4::cuda::detail::tc
