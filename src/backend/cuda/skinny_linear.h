// The BF16-weight linear for decode-sized inputs: one kernel that streams the weight once and
// multiplies it by every row of x in FP32 on the CUDA cores. At these sizes the weight's bytes
// are all the work; the split into three BF16 pieces and cuBLAS's tensor-core GEMM behind
// CudaBackend::linear cost three launches and reach 55-62% of the copy bandwidth. Measured on an
// H100 (bench/RESULTS.md, 2026-12-06): 84-86% at one row of x, 77-79% at four, and at eight rows
// 47-50% on 100 MB weights (slower than the three products) but twice their speed on a 6 MB one.
// Hence the shapes it takes: up to kSkinnyMaxRows rows, or up to kSkinnyNarrowMaxRows where the
// weight is at most kSkinnyNarrowBytes. Numerics: each output is a sum of k FP32 fused
// multiply-adds of x by the weight's exact FP32 value, in an order of its own, so it is within
// gamma_k sum |x w| of the exact sum, as an FP32 GEMM's is (tests/kernels/skinny_linear_test.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp4::cuda::detail {

constexpr int64_t kSkinnyMaxRows = 4;
constexpr int64_t kSkinnyNarrowMaxRows = 8;
constexpr int64_t kSkinnyNarrowBytes = int64_t{16} << 20;

struct SkinnyLinearArgs {
  const float* x = nullptr;     // [m, k], 16-byte aligned rows
  const uint16_t* w = nullptr;  // [n, k] BF16 bits, 16-byte aligned rows
  float* y = nullptr;           // [m, n]
  int64_t m = 0, n = 0, k = 0;
};

// Several weights multiplied by one x in one launch (the projections of a layer's input): each
// part's CTAs are those of its own launch, so every y is the single launch's, bit for bit.
constexpr int kSkinnyMaxParts = 6;
struct SkinnyLinearGroup {
  SkinnyLinearArgs parts[kSkinnyMaxParts];  // the same x, m and k
  int64_t first_cta[kSkinnyMaxParts + 1] = {};  // part i: CTAs [first_cta[i], first_cta[i + 1])
  int count = 0;
};

// Whether the kernel takes this shape: 1 <= m <= kSkinnyMaxRows (or kSkinnyNarrowMaxRows with
// a weight of at most kSkinnyNarrowBytes), k a multiple of 8 (16-byte weight chunks), and x and
// w 16-byte aligned.
bool skinny_linear_fits(const SkinnyLinearArgs& a);
cudaError_t launch_skinny_linear(const SkinnyLinearArgs& a, cudaStream_t stream);
// Every part must fit (skinny_linear_fits) and share x, m and k; 1 to kSkinnyMaxParts parts.
cudaError_t launch_skinny_linear_group(const SkinnyLinearArgs* parts, int count, cudaStream_t stream);

}  // namespace fp4::cuda::detail
