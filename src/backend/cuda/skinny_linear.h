// The BF16-weight linear for decode-sized inputs (at most kSkinnyMaxRows rows of x): one kernel
// that streams the weight once and multiplies it by every row of x in FP32 on the CUDA cores.
// At these sizes the weight's bytes are all the work; the split into three BF16 pieces and
// cuBLAS's tensor-core GEMM behind CudaBackend::linear cost three launches and reach about 55%
// of the copy bandwidth (bench/RESULTS.md). Numerics: each output is a sum of k FP32 fused
// multiply-adds of x by the weight's exact FP32 value, in an order of its own, so it is within
// gamma_k sum |x w| of the exact sum, as an FP32 GEMM's is (tests/kernels/skinny_linear_test.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp4::cuda::detail {

constexpr int64_t kSkinnyMaxRows = 8;

struct SkinnyLinearArgs {
  const float* x = nullptr;     // [m, k], 16-byte aligned rows
  const uint16_t* w = nullptr;  // [n, k] BF16 bits, 16-byte aligned rows
  float* y = nullptr;           // [m, n]
  int64_t m = 0, n = 0, k = 0;
};

// Whether the kernel takes this shape: 1 <= m <= kSkinnyMaxRows, k a multiple of 8 (16-byte
// weight chunks), and x and w 16-byte aligned.
bool skinny_linear_fits(const SkinnyLinearArgs& a);
cudaError_t launch_skinny_linear(const SkinnyLinearArgs& a, cudaStream_t stream);

}  // namespace fp4::cuda::detail
