// The linear for decode-sized inputs on weights held as BF16 or MXFP8: one kernel that streams
// the weight once and multiplies it by every row of x in FP32 on the CUDA cores. At these sizes
// the weight's bytes are all the work; the split into three BF16 pieces and cuBLAS's tensor-core
// GEMM behind CudaBackend::linear cost three launches and reach 55-62% of the copy bandwidth.
// Measured on an H100 (bench/RESULTS.md, 2026-12-06), BF16: 84-86% at one row of x, 77-79% at
// four, and at eight rows 47-50% on 100 MB weights (slower than the three products) but twice
// their speed on a 6 MB one. Hence the shapes it takes: up to kSkinnyMaxRows rows, or up to
// kSkinnyNarrowMaxRows where the weight has at most kSkinnyNarrowBytes / 2 values.
// Numerics: each output is a sum of k FP32 fused multiply-adds of x by the weight's exact FP32
// value, in an order of its own, so it is within gamma_k sum |x w| of the exact sum, as an FP32
// GEMM's is (tests/kernels/skinny_linear_test.cpp). On an MXFP8 weight each chunk of 16 codes
// (E4M3, exact in FP32 by the hardware conversions) is multiplied with x from zero and the sum
// times the block's power-of-two scale added to the partial sum: the scale commutes with the
// rounding, so the same bound holds (unless a chunk's sum overflows or falls below FP32's
// normal range: |x| past about 2^115 or below 2^-117).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp4::cuda::detail {

constexpr int64_t kSkinnyMaxRows = 4;
constexpr int64_t kSkinnyNarrowMaxRows = 8;
constexpr int64_t kSkinnyNarrowBytes = int64_t{16} << 20;

struct SkinnyLinearArgs {
  const float* x = nullptr;     // [m, k], 16-byte aligned rows
  const uint16_t* w = nullptr;  // [n, k] BF16 bits, 16-byte aligned rows (or w_e4m3 instead)
  float* y = nullptr;           // [m, n]
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* w_e4m3 = nullptr;    // [n, k] MXFP8 codes, 16-byte aligned, k a multiple of 32
  const uint8_t* w_scales = nullptr;  // [n, k / 32] UE8M0 block scales
};

// Several weights multiplied by one x in one launch (the projections of a layer's input), all in
// one form (BF16 or MXFP8): each part's CTAs are those of its own launch, so every y is the
// single launch's, bit for bit.
constexpr int kSkinnyMaxParts = 6;
struct SkinnyLinearGroup {
  SkinnyLinearArgs parts[kSkinnyMaxParts];  // the same x, m, k and weight form
  int64_t first_cta[kSkinnyMaxParts + 1] = {};  // part i: CTAs [first_cta[i], first_cta[i + 1])
  int count = 0;
};

// Whether the kernel takes this shape: 1 <= m <= kSkinnyMaxRows (or kSkinnyNarrowMaxRows with
// a weight of at most kSkinnyNarrowBytes / 2 values), exactly one weight form, k a multiple of
// 8 (BF16: 16-byte chunks) or of 32 (MXFP8: whole blocks), and x and the weight 16-byte aligned.
bool skinny_linear_fits(const SkinnyLinearArgs& a);
cudaError_t launch_skinny_linear(const SkinnyLinearArgs& a, cudaStream_t stream);
// Every part must fit (skinny_linear_fits) and share x, m, k and the weight form; 1 to
// kSkinnyMaxParts parts.
cudaError_t launch_skinny_linear_group(const SkinnyLinearArgs* parts, int count, cudaStream_t stream);

}  // namespace fp4::cuda::detail
