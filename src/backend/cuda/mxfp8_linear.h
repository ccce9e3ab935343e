// The linear on an MXFP8-held weight for inputs of 5 to kMxfp8LinearMaxRows rows (decode batches
// past the skinny kernel's, skinny_linear.h): FP16 tensor cores on the weight's E4M3 codes as they
// are, the block scales applied to each block's partial sums in FP32. The weight is read once
// (33 bytes per 32 values) instead of being decoded to BF16 in scratch and read again.
//
// Numerics. Each row of x is scaled by the power of two 2^s that puts its largest magnitude in
// [2^14, 2^15) (s capped at 127; 0 for a row of zeros or one holding an infinity or NaN) and
// rounded to FP16 P = kMxfp8LinearPieces times in turn (each piece what the ones before left),
// x 2^s = the pieces + r, |r| <= 2^-11P |x 2^s| + 2^-25 (the last rounding and FP16's subnormal
// spacing); an E4M3 code is exact in FP16 and a product of two FP16s exact in FP32. For each
// MXFP8 block (32 values along k) the MMAs sum the 32 P products into a zeroed FP32 tile (the
// tensor cores may truncate: u' = 2^-23 per addition); the tile times the block's scale (exact, a
// power of two) is added to the output's FP32 sum by a fused multiply-add, blocks in order within
// a split of k, the splits' sums added in split order, then times 2^-s (exact). So
// |y - x.w| <= (gamma'_{32P} + gamma_{k/32 + splits}) (1 + 2^-10) S + 2^-11P S + 2^-25-s sum |w|
// with S = sum |x w|, within a few FP32 GEMMs' bound (tests/kernels/mxfp8_linear_test.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp4::cuda::detail {

// Past 32 rows the kernel is slower than decoding the weight to BF16 and the three products
// (bench/RESULTS.md, 2026-12-07): its cost grows with the rows (it is bound by its instructions,
// not by the weight's bytes).
constexpr int64_t kMxfp8LinearMaxRows = 32;
// FP16 pieces of x: x 2^s = sum of the pieces + r, |r| <= 2^-(11 pieces) |x 2^s| + 2^-25.
constexpr int kMxfp8LinearPieces = 2;
// Weights of one input a group launch takes (a layer's q, k, v, index_q and index_k).
constexpr int kMxfp8LinearMaxParts = 6;

struct Mxfp8LinearArgs {
  const float* x = nullptr;           // [m, k], 16-byte aligned
  const uint8_t* w_e4m3 = nullptr;    // [n, k] E4M3 codes, 16-byte aligned
  const uint8_t* w_scales = nullptr;  // [n, k / 32] UE8M0, 4-byte aligned
  float* y = nullptr;                 // [m, n]
  int64_t m = 0, n = 0, k = 0;
};

// Whether the kernel takes this shape: 1 <= m <= kMxfp8LinearMaxRows, n a multiple of 8, k a
// multiple of 128 (four MXFP8 blocks, whose scales one 32-bit load reads), and the alignments
// above.
bool mxfp8_linear_fits(const Mxfp8LinearArgs& a);
// The scratch launch_mxfp8_linear needs (the split x, its row factors, the splits' partial sums):
// a function of the shape and the device's SM count only, so a captured launch stays valid.
int64_t mxfp8_linear_workspace_bytes(const Mxfp8LinearArgs& a);
// `workspace` holds mxfp8_linear_workspace_bytes(a) bytes, 16-byte aligned. Three launches
// (split, product, sum of the splits; the last only when k is split).
cudaError_t launch_mxfp8_linear(const Mxfp8LinearArgs& a, void* workspace, cudaStream_t stream);

// The same for 1 to kMxfp8LinearMaxParts weights of one input (the same x, m and k, each part
// fitting as above): x is split once, and one product launch and one sum launch serve every
// part. Each part's k is split as its launch alone splits it, so its y is that launch's, bit for
// bit (Backend::linears' promise).
bool mxfp8_linear_group_fits(const Mxfp8LinearArgs* parts, int count);

// How a group launch divides the work on `sms` SMs (a host function; the tests check it). Part
// i takes CTAs [first_cta, first_cta + tiles x splits), one per (128-feature tile, split of k
// into groups of per_split x 128 values), and when split its partial sums [splits][m][n] lie
// partial_offset floats into the partial-sum scratch. A part's entry depends on its own n and
// the shared m and k only: what its launch alone would do.
struct Mxfp8PartPlan {
  int64_t tiles = 1, per_split = 1, splits = 1, first_cta = 0, partial_offset = 0;
};
struct Mxfp8GroupPlan {
  int tiles = 1;  // 16-row tiles of x (1 or 2)
  int64_t rows = 16, groups = 1, ctas = 0;
  Mxfp8PartPlan parts[kMxfp8LinearMaxParts];
  int64_t pieces_bytes = 0, factors_bytes = 0, partial_bytes = 0;  // the workspace, in this order
};
// `parts` as mxfp8_linear_group_fits takes them (the pointers are not read).
Mxfp8GroupPlan mxfp8_linear_group_plan(const Mxfp8LinearArgs* parts, int count, int sms);
int64_t mxfp8_linear_group_workspace_bytes(const Mxfp8LinearArgs* parts, int count);
cudaError_t launch_mxfp8_linear_group(const Mxfp8LinearArgs* parts, int count, void* workspace,
                                      cudaStream_t stream);

}  // namespace fp4::cuda::detail
