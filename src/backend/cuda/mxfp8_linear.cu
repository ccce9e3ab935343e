// See mxfp8_linear.h. Three kernels:
// - split_rows_kernel, one CTA per row of x (padded to whole 16-row tiles with zero rows): the
//   row's scale, its FP16 pieces in the order the product's MMAs take them (fragment_unit), and
//   the factor 2^-s.
// - mxfp8_linear_kernel<kTiles>, one CTA per (part, 128-feature tile, split of k), 4 warps (the
//   parts of a group are weights of the same x, their CTAs side by side along the grid, each
//   part's tiles and splits as its launch alone would have them, so that x is split once and
//   one launch streams them all); warp w owns 32 output
//   features (four 8-column MMA tiles, B) of the CTA's 128 and every row of x (kTiles <= 2
//   16-row A tiles), over the split's groups of 128 values of k (four MXFP8 blocks). In an MMA of block
//   b, lane (g, t) supplies k = 8t + 4j + {0..3} for step j in {0, 1}: its B fragment is the 8
//   contiguous code bytes [8t, 8t + 8) of its feature g's block, four hardware E4M3 -> FP16x2
//   conversions, and its A operand of each piece and step one 16-byte shared-memory read (the k
//   order is a permutation applied to both operands, which a dot product allows). Each
//   warp streams its features' codes and scales through its own ring of shared-memory slots
//   (cp.async, a group ahead: 4 KB of weight in flight a warp). x's pieces for a group are
//   copied once a CTA into a two-slot ring that every warp reads its A operands from (one
//   group ahead, from L2), so x crosses L2 once a CTA rather than once a warp; one CTA barrier
//   a group publishes both rings.
// - sum_splits_kernel: each part's y = its splits' partial sums added in split order.
// The product and the sum are programmatic dependents of the kernel before them: each starts,
// and the product copies its first weights, while that kernel ends.
// The product's loop is written for few instructions: the A operands need no register moves,
// each lane's copy addresses are worked out once a CTA, and a group whose block scales are all
// normal (the usual case) decodes each by one shift. What bounds it is its memory structure
// (one group in flight a warp) and the chains from shared memory to the MMAs
// (docs/kernels/mxfp8_linear.md).
#include "backend/cuda/mxfp8_linear.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/device_query.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/mxfp8_linear_split.cuh"
#include "formats/minifloat.h"

namespace fp4::cuda::detail {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kNTiles = 4;  // 8-feature MMA tiles a warp
constexpr int kCtaFeatures = kWarps * kNTiles * 8;
constexpr int kGroup = 128;  // values of k a step: four MXFP8 blocks

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

}  // namespace

Mxfp8GroupPlan mxfp8_linear_group_plan(const Mxfp8LinearArgs* parts, int count, int sms) {
  const Mxfp8LinearArgs& a = parts[0];
  Mxfp8GroupPlan p;
  p.tiles = static_cast<int>((a.m + 15) / 16);
  p.rows = 16 * p.tiles;
  p.groups = a.k / kGroup;
  int64_t partial_floats = 0;
  for (int i = 0; i < count; ++i) {
    Mxfp8PartPlan& part = p.parts[i];
    part.tiles = (parts[i].n + kCtaFeatures - 1) / kCtaFeatures;
    // About four CTAs an SM: enough warps to keep the weight streaming, and k split no finer.
    const int64_t wanted = std::clamp<int64_t>((4 * int64_t{sms} + part.tiles - 1) / part.tiles, 1, p.groups);
    part.per_split = (p.groups + wanted - 1) / wanted;
    part.splits = (p.groups + part.per_split - 1) / part.per_split;
    part.first_cta = p.ctas;
    p.ctas += part.tiles * part.splits;
    part.partial_offset = partial_floats;
    if (part.splits > 1) partial_floats += part.splits * a.m * parts[i].n;
  }
  p.pieces_bytes = round_up(kMxfp8LinearPieces * p.rows * a.k * 2, 256);
  p.factors_bytes = round_up(p.rows * 4, 256);
  p.partial_bytes = round_up(partial_floats * 4, 256);
  return p;
}

namespace {

// What the product and sum kernels take of a group, by value: part i's weight, its output (its
// splits' partial sums, [splits][m][n_i], or y itself when k is not split), its y, and its plan.
struct GroupArgs {
  const uint8_t* w_e4m3[kMxfp8LinearMaxParts] = {};
  const uint8_t* w_scales[kMxfp8LinearMaxParts] = {};
  float* out[kMxfp8LinearMaxParts] = {};
  float* y[kMxfp8LinearMaxParts] = {};
  int64_t n[kMxfp8LinearMaxParts] = {};
  int64_t tiles[kMxfp8LinearMaxParts] = {}, per_split[kMxfp8LinearMaxParts] = {}, splits[kMxfp8LinearMaxParts] = {};
  int64_t first_cta[kMxfp8LinearMaxParts + 1] = {};
  int64_t first_sum[kMxfp8LinearMaxParts + 1] = {};  // the sum kernel's outputs: m x n_i of each split part
  int count = 0;
  int64_t m = 0, k = 0;
};

// The plan's SM count; 1 where it cannot be asked (the launch then reports the device's error).
int multiprocessors() {
  int sms = 1;
  return current_device_multiprocessors(&sms) == cudaSuccess ? sms : 1;
}

// A warp's ring of shared-memory slots, one group (its 32 features' 128 codes and 4 scales
// each) a slot, filled by cp.async kSlots - 1 groups ahead. In a slot feature f's 16-byte chunk
// c sits at chunk c ^ 2 (f mod 4), so that the 8-byte reads of one block (features g of a
// tile, chunks 2b and 2b + 1) take the two wavefronts 256 bytes need rather than eight.
constexpr int kSlots = 2;
constexpr int kSlotCodeBytes = kNTiles * 8 * kGroup;
constexpr int kSlotBytes = kSlotCodeBytes + kNTiles * 8 * 4;
constexpr int kRingBytes = kWarps * kSlots * kSlotBytes;

// The CTA's ring of x: two slots, each a group's 16 chunks of every piece and tile in fragment
// order (fragment_unit), [piece][tile][chunk][unit], as they lie in the split pieces.
constexpr int kXSlots = 2;
constexpr int kXRegionBytes = kGroup / 8 * 256;  // one piece and tile: 4 KB
template <int kTiles> constexpr int kXSlotBytes = kMxfp8LinearPieces * kTiles * kXRegionBytes;
template <int kTiles> constexpr int kSmemBytes = kRingBytes + kXSlots * kXSlotBytes<kTiles>;

__device__ __forceinline__ int swizzled_chunk(int feature, int chunk) { return chunk ^ (2 * (feature % 4)); }

// What one lane copies into the rings each group, worked out once a CTA: the weights' 16-byte
// code chunks i = 0..7 (chunk lane + 32 i of the warp's 32 feature rows of 128 bytes: 4 rows an
// instruction) and feature lane's 4 scale bytes; and the thread's 16-byte units of x. The
// pointers are the next group's and move on by a group each fill.
template <int kTiles>
struct RingCopies {
  static constexpr int kChunks = kSlotCodeBytes / 16 / 32;
  static constexpr int kXUnits = kXSlotBytes<kTiles> / 16 / kThreads;
  static_assert(kXRegionBytes / 16 == 2 * kThreads, "a thread's x units i and i + 1 share a region");
  const uint8_t* codes;   // chunk 0's source; chunk i is 4 i feature rows on
  const uint8_t* scales;  // feature lane's scales
  const uint8_t* x;       // unit 0's source; unit i is in region i / 2, (i % 2) 2 KB on
  int64_t four_rows;      // 4 k bytes
  int64_t region;         // bytes from one (piece, tile)'s pieces to the next: k / 8 chunks of 256
  uint32_t live;          // bit i: chunk i's feature exists; bit kChunks: feature lane's
  int code_dst;           // chunk 0's offset in a slot; chunk i is 512 i further
};

template <int kTiles>
__device__ __forceinline__ RingCopies<kTiles> ring_copies(const Mxfp8LinearArgs& a, int64_t feature0, int64_t g0,
                                                          const __half* pieces, int lane) {
  RingCopies<kTiles> c;
  const int row = lane / 8, chunk = lane % 8;  // feature feature0 + 4i + row, chunk of its 128 bytes
  // A chunk past n is zero-filled from chunk 0's address, which is kept inside the weight: when
  // chunk 0's feature is past n, so is every later one's, and no address is used but that one.
  c.codes = a.w_e4m3 + min(feature0 + row, a.n - 1) * a.k + g0 * kGroup + chunk * 16;
  c.scales = a.w_scales + (feature0 + lane) * (a.k / 32) + g0 * 4;
  c.x = reinterpret_cast<const uint8_t*>(pieces) + g0 * kXRegionBytes + threadIdx.x * 16;
  c.four_rows = 4 * a.k;
  c.region = a.k / 8 * 256;
  c.live = 0;
#pragma unroll
  for (int i = 0; i < RingCopies<kTiles>::kChunks; ++i) c.live |= (feature0 + 4 * i + row < a.n ? 1u : 0u) << i;
  c.live |= (feature0 + lane < a.n ? 1u : 0u) << RingCopies<kTiles>::kChunks;
  c.code_dst = row * kGroup + swizzled_chunk(row, chunk) * 16;
  return c;
}

// The next group's weights (features past n zero-filled, their scales left as they are: those
// outputs are never stored) and x. One commit group per call, even past the split.
template <int kTiles>
__device__ __forceinline__ void fill_slots(RingCopies<kTiles>& c, uint8_t* w_slot, uint8_t* x_slot, bool copy_weights,
                                           bool copy_x) {
  using R = RingCopies<kTiles>;
  if (copy_weights) {
#pragma unroll
    for (int i = 0; i < R::kChunks; ++i) {
      const bool live = (c.live >> i) & 1u;
      tc::cp_async16(w_slot + c.code_dst + 512 * i, live ? c.codes + i * c.four_rows : c.codes, live);
    }
    if ((c.live >> R::kChunks) & 1u) tc::cp_async4(w_slot + kSlotCodeBytes + (threadIdx.x % 32) * 4, c.scales);
  }
  if (copy_x) {
#pragma unroll
    for (int i = 0; i < R::kXUnits; ++i) {
      tc::cp_async16(x_slot + (i * kThreads + threadIdx.x) * 16, c.x + (i / 2) * c.region + (i % 2) * 2048, true);
    }
  }
  tc::cp_async_commit();
}

// A block's A operands: for each 16-row tile, piece and MMA step j, lane (g, t)'s unit (g, j) of
// chunk 4b + t, as one 16-byte read.
template <int kTiles>
struct XFragments {
  uint4 r[kTiles][kMxfp8LinearPieces][2];
};

// The lane's offsets of units (g, j = 0) and (g, 1) of its chunk t in a region (block 0).
__device__ __forceinline__ int x_unit_offset(int grp, int tig, int j) {
  return tig * 256 + fragment_unit(grp, j, tig) * 16;
}

template <int kTiles>
__device__ __forceinline__ void load_x(XFragments<kTiles>& x, const uint8_t* slot, int b, int offset0, int offset1) {
#pragma unroll
  for (int mt = 0; mt < kTiles; ++mt) {
#pragma unroll
    for (int piece = 0; piece < kMxfp8LinearPieces; ++piece) {
      const uint8_t* region = slot + (piece * kTiles + mt) * kXRegionBytes + b * 1024;
      x.r[mt][piece][0] = *reinterpret_cast<const uint4*>(region + offset0);
      x.r[mt][piece][1] = *reinterpret_cast<const uint4*>(region + offset1);
    }
  }
}

// A UE8M0 scale whose code is neither 0 nor 255 (kAllNormal: the warp checked its group's) is
// its code in a float's exponent field.
template <bool kAllNormal>
__device__ __forceinline__ float block_scale(uint8_t code) {
  if constexpr (kAllNormal) {
    return __uint_as_float(static_cast<uint32_t>(code) << 23);
  } else {
    return ue8m0_decode(code);
  }
}

// Whether every scale byte of the warp's slot (feature lane's 4, for every lane) is neither 0
// nor 255: the usual case, whose decode is one shift.
__device__ __forceinline__ bool scales_all_normal(const uint8_t* w_slot, int lane) {
  const uint32_t word = *reinterpret_cast<const uint32_t*>(w_slot + kSlotCodeBytes + lane * 4);
  const auto has_zero_byte = [](uint32_t v) { return ((v - 0x01010101u) & ~v & 0x80808080u) != 0; };
  return __all_sync(0xFFFFFFFFu, !has_zero_byte(word) && !has_zero_byte(~word));
}

// Block b of the slot's group: its codes expanded to FP16 B fragments, then for each 16-row tile
// of x the pieces' MMAs into a zeroed tile, added to acc times the block's scales.
template <int kTiles, bool kAllNormal>
__device__ __forceinline__ void multiply_block(float (&acc)[kTiles][kNTiles][4], const uint8_t* slot, int b,
                                               const XFragments<kTiles>& x, int grp, int tig) {
  uint32_t w16[kNTiles][4];  // step j's B registers: w16[.][2j], w16[.][2j + 1]
  float s[kNTiles][2];       // the block's scales of features 2t and 2t + 1 of each tile
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    const int f = nt * 8 + grp;
    const uint2 codes =
        *reinterpret_cast<const uint2*>(slot + f * kGroup + swizzled_chunk(f, 2 * b + tig / 2) * 16 + (tig % 2) * 8);
    w16[nt][0] = tc::e4m3x2_to_f16x2(codes.x);
    w16[nt][1] = tc::e4m3x2_to_f16x2(codes.x >> 16);
    w16[nt][2] = tc::e4m3x2_to_f16x2(codes.y);
    w16[nt][3] = tc::e4m3x2_to_f16x2(codes.y >> 16);
    const uint8_t* scale_bytes = slot + kSlotCodeBytes + (nt * 8 + 2 * tig) * 4 + b;
    s[nt][0] = block_scale<kAllNormal>(scale_bytes[0]);
    s[nt][1] = block_scale<kAllNormal>(scale_bytes[4]);
  }
#pragma unroll
  for (int mt = 0; mt < kTiles; ++mt) {
    float block[kNTiles][4] = {};
#pragma unroll
    for (int piece = 0; piece < kMxfp8LinearPieces; ++piece) {
      const uint4 a0 = x.r[mt][piece][0], a1 = x.r[mt][piece][1];
      const uint32_t step0[4] = {a0.x, a0.y, a0.z, a0.w}, step1[4] = {a1.x, a1.y, a1.z, a1.w};
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        tc::mma_m16n8k16_f16(block[nt], step0, w16[nt][0], w16[nt][1]);
        tc::mma_m16n8k16_f16(block[nt], step1, w16[nt][2], w16[nt][3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      acc[mt][nt][0] = fmaf(block[nt][0], s[nt][0], acc[mt][nt][0]);
      acc[mt][nt][1] = fmaf(block[nt][1], s[nt][1], acc[mt][nt][1]);
      acc[mt][nt][2] = fmaf(block[nt][2], s[nt][0], acc[mt][nt][2]);
      acc[mt][nt][3] = fmaf(block[nt][3], s[nt][1], acc[mt][nt][3]);
    }
  }
}

template <int kTiles, bool kAllNormal>
__device__ __forceinline__ void multiply_group(float (&acc)[kTiles][kNTiles][4], const uint8_t* w_slot,
                                               const uint8_t* x_slot, int grp, int tig, int x_offset0, int x_offset1) {
#pragma unroll 1  // unrolled, ptxas hoists the blocks' loads and takes more registers
  for (int b = 0; b < 4; ++b) {
    XFragments<kTiles> x;
    load_x<kTiles>(x, x_slot, b, x_offset0, x_offset1);
    multiply_block<kTiles, kAllNormal>(acc, w_slot, b, x, grp, tig);
  }
}

// CTAs an SM: as many as the registers (4 at one row tile, 3 at two) and the shared memory
// allow (227 KB an SM, 1 KB of it reserved a CTA).
template <int kTiles>
constexpr int kCtasPerSm = std::min(kTiles == 1 ? 4 : 3, 227 * 1024 / (kSmemBytes<kTiles> + 1024 + 256));

template <int kTiles>
__global__ void __launch_bounds__(kThreads, kCtasPerSm<kTiles>)
    mxfp8_linear_kernel(const GroupArgs group, const __half* pieces, const float* factors) {
  extern __shared__ __align__(16) uint8_t smem[];
  // The CTA's part, tile and split, read from shared memory where they are used rather than
  // held in registers through the loop (which spilled at two row tiles). y is this split's
  // output: its partial sums, or the part's y when k is whole.
  __shared__ Mxfp8LinearArgs part_args;
  __shared__ int64_t cta_feature0, cta_g0, cta_g1;
  if (threadIdx.x == 0) {
    int part = 0;
    while (part + 1 < group.count && blockIdx.x >= group.first_cta[part + 1]) ++part;
    const int64_t local = blockIdx.x - group.first_cta[part], tiles = group.tiles[part];
    const int64_t split = local / tiles, per_split = group.per_split[part];
    part_args = {.w_e4m3 = group.w_e4m3[part], .w_scales = group.w_scales[part],
                 .y = group.out[part] + (group.splits[part] > 1 ? split * group.m * group.n[part] : 0),
                 .m = group.m, .n = group.n[part], .k = group.k};
    cta_feature0 = (local - split * tiles) * kCtaFeatures;
    cta_g0 = split * per_split;
    cta_g1 = min(cta_g0 + per_split, group.k / kGroup);
  }
  __syncthreads();
  const Mxfp8LinearArgs& a = part_args;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, grp = lane / 4, tig = lane % 4;
  const int64_t feature0 = cta_feature0 + warp * kNTiles * 8;
  const int64_t g0 = cta_g0, g1 = cta_g1;
  float acc[kTiles][kNTiles][4] = {};
  // Every warp runs the loop, a warp past n on zero-filled features (its outputs are not
  // stored): the x ring and the barrier are the CTA's.
  uint8_t* ring = smem + warp * kSlots * kSlotBytes;
  uint8_t* x_ring = smem + kRingBytes;
  RingCopies<kTiles> copies = ring_copies<kTiles>(a, feature0, g0, pieces, lane);
  const int x_offset0 = x_unit_offset(grp, tig, 0), x_offset1 = x_unit_offset(grp, tig, 1);
  // Commit groups in order: the weights of g0 (no kernel's output, so copied while the split
  // kernel may still run), then x of g0 (its output); each group then x and weights of the next
  // group, so that waiting for every group leaves this group's landed. x of each group is in the
  // newest commit group but one, so deeper weight rings need another order.
  static_assert(kSlots == 2, "the commit order above is for one group ahead");
#pragma unroll
  for (int i = 0; i < kSlots - 1; ++i) {
    fill_slots<kTiles>(copies, ring + i * kSlotBytes, nullptr, g0 + i < g1, false);
    copies.codes += kGroup;
    copies.scales += 4;
  }
  wait_for_prerequisite_grid();
  fill_slots<kTiles>(copies, nullptr, x_ring, false, g0 < g1);
  copies.x += kXRegionBytes;
  int slot = kSlots - 1;
#pragma unroll 1
  for (int64_t g = g0; g < g1; ++g) {
    tc::cp_async_wait<0>();
    __syncthreads();  // every thread's copies of this group landed, and every warp is done with
                      // the slots refilled next (read in the previous group)
    const uint8_t* x_slot = x_ring + (g - g0) % kXSlots * kXSlotBytes<kTiles>;
    fill_slots<kTiles>(copies, ring + slot * kSlotBytes, x_ring + (g - g0 + 1) % kXSlots * kXSlotBytes<kTiles>,
                       g + kSlots - 1 < g1, g + 1 < g1);
    copies.codes += kGroup;
    copies.scales += 4;
    copies.x += kXRegionBytes;
    slot = slot == kSlots - 1 ? 0 : slot + 1;
    const uint8_t* w_slot = ring + slot * kSlotBytes;
    if (scales_all_normal(w_slot, lane)) {
      multiply_group<kTiles, true>(acc, w_slot, x_slot, grp, tig, x_offset0, x_offset1);
    } else {
      multiply_group<kTiles, false>(acc, w_slot, x_slot, grp, tig, x_offset0, x_offset1);
    }
  }
  allow_dependent_launch();  // the sum kernel's CTAs wait for the partial sums themselves
  // This split's partial sums (y itself when k is whole): rows t = 16 mt + g and + 8, features
  // 2t' and 2t' + 1 of each tile.
  float* const out = a.y;
#pragma unroll
  for (int mt = 0; mt < kTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t t = mt * 16 + grp + 8 * half;
      if (t >= a.m) continue;
      const float f = factors[t];
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const int64_t j = feature0 + nt * 8 + 2 * tig;
        if (j >= a.n) continue;
        *reinterpret_cast<float2*>(out + t * a.n + j) =
            make_float2(acc[mt][nt][2 * half] * f, acc[mt][nt][2 * half + 1] * f);
      }
    }
  }
}

// Over the parts whose k is split, each a [splits][m][n] array of partial sums.
__global__ void __launch_bounds__(kSplitThreads) sum_splits_kernel(const GroupArgs group) {
  const int64_t i = int64_t{blockIdx.x} * kSplitThreads + threadIdx.x;
  if (i >= group.first_sum[group.count]) return;
  wait_for_prerequisite_grid();  // the product's partial sums
  int part = 0;
  while (part + 1 < group.count && i >= group.first_sum[part + 1]) ++part;
  const int64_t count = group.m * group.n[part], j = i - group.first_sum[part];
  const float* partial = group.out[part];
  float sum = partial[j];
  for (int64_t s = 1; s < group.splits[part]; ++s) sum += partial[s * count + j];
  group.y[part][j] = sum;
}

template <int kTiles>
cudaError_t launch_product(const GroupArgs& group, const Mxfp8GroupPlan& p, const __half* pieces, const float* factors,
                           cudaStream_t stream) {
  static const cudaError_t opt_in =
      cudaFuncSetAttribute(mxfp8_linear_kernel<kTiles>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kSmemBytes<kTiles>);
  if (opt_in != cudaSuccess) return opt_in;
  // A programmatic dependent of the split kernel: its launch and its first weight copies
  // overlap the split.
  return launch_dependent(mxfp8_linear_kernel<kTiles>, dim3(static_cast<unsigned>(p.ctas)), dim3(kThreads),
                          kSmemBytes<kTiles>, stream, group, pieces, factors);
}

}  // namespace

bool mxfp8_linear_fits(const Mxfp8LinearArgs& a) {
  const auto aligned = [](const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; };
  return a.m >= 1 && a.m <= kMxfp8LinearMaxRows && a.n >= 8 && a.n % 8 == 0 && a.k >= kGroup &&
         a.k % kGroup == 0 && a.k <= int64_t{1} << 30 && (a.n + kCtaFeatures - 1) / kCtaFeatures <= 0x7FFFFFFF &&
         a.x != nullptr && a.w_e4m3 != nullptr && a.w_scales != nullptr && a.y != nullptr && aligned(a.x, 16) &&
         aligned(a.w_e4m3, 16) && aligned(a.w_scales, 4) && aligned(a.y, 8);
}

namespace {

// Every part fits alone and they share x, m and k.
bool parts_fit(const Mxfp8LinearArgs* parts, int count) {
  if (parts == nullptr || count < 1 || count > kMxfp8LinearMaxParts) return false;
  for (int i = 0; i < count; ++i) {
    const Mxfp8LinearArgs& a = parts[i];
    if (!mxfp8_linear_fits(a) || a.x != parts[0].x || a.m != parts[0].m || a.k != parts[0].k) return false;
  }
  return true;
}

// One CTA per (part, tile, split): the grid's x limit.
bool grid_fits(const Mxfp8GroupPlan& p) { return p.ctas <= 0x7FFFFFFF; }

}  // namespace

bool mxfp8_linear_group_fits(const Mxfp8LinearArgs* parts, int count) {
  return parts_fit(parts, count) && grid_fits(mxfp8_linear_group_plan(parts, count, multiprocessors()));
}

int64_t mxfp8_linear_group_workspace_bytes(const Mxfp8LinearArgs* parts, int count) {
  const Mxfp8GroupPlan p = mxfp8_linear_group_plan(parts, count, multiprocessors());
  return p.pieces_bytes + p.factors_bytes + p.partial_bytes;
}

cudaError_t launch_mxfp8_linear_group(const Mxfp8LinearArgs* parts, int count, void* workspace,
                                      cudaStream_t stream) {
  if (!parts_fit(parts, count) || workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const Mxfp8LinearArgs& a = parts[0];
  const Mxfp8GroupPlan p = mxfp8_linear_group_plan(parts, count, multiprocessors());
  if (!grid_fits(p)) return cudaErrorInvalidValue;
  auto* bytes = static_cast<uint8_t*>(workspace);
  auto* pieces = reinterpret_cast<__half*>(bytes);
  auto* factors = reinterpret_cast<float*>(bytes + p.pieces_bytes);
  float* partial = reinterpret_cast<float*>(bytes + p.pieces_bytes + p.factors_bytes);
  GroupArgs group;
  group.count = count;
  group.m = a.m;
  group.k = a.k;
  for (int i = 0; i < count; ++i) {
    const Mxfp8PartPlan& part = p.parts[i];
    group.w_e4m3[i] = parts[i].w_e4m3;
    group.w_scales[i] = parts[i].w_scales;
    group.y[i] = parts[i].y;
    group.n[i] = parts[i].n;
    group.tiles[i] = part.tiles;
    group.per_split[i] = part.per_split;
    group.splits[i] = part.splits;
    group.first_cta[i + 1] = part.first_cta + part.tiles * part.splits;
    group.out[i] = part.splits > 1 ? partial + part.partial_offset : parts[i].y;
    group.first_sum[i + 1] = group.first_sum[i] + (part.splits > 1 ? a.m * parts[i].n : 0);
  }
  split_rows_kernel<<<static_cast<unsigned>(p.rows), kSplitThreads, 0, stream>>>(a.x, a.m, a.k, p.rows, pieces,
                                                                                  factors);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const cudaError_t e = p.tiles == 1 ? launch_product<1>(group, p, pieces, factors, stream)
                                     : launch_product<2>(group, p, pieces, factors, stream);
  if (e != cudaSuccess) return e;
  if (group.first_sum[count] > 0) {
    const int64_t sums = group.first_sum[count];
    return launch_dependent(sum_splits_kernel, dim3(static_cast<unsigned>((sums + kSplitThreads - 1) / kSplitThreads)),
                            dim3(kSplitThreads), 0, stream, group);
  }
  return cudaSuccess;
}

int64_t mxfp8_linear_workspace_bytes(const Mxfp8LinearArgs& a) { return mxfp8_linear_group_workspace_bytes(&a, 1); }

cudaError_t launch_mxfp8_linear(const Mxfp8LinearArgs& a, void* workspace, cudaStream_t stream) {
  return launch_mxfp8_linear_group(&a, 1, workspace, stream);
}

}  // namespace fp4::cuda::detail
