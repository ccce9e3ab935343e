// Raw launchers of the quantize kernels, for quantize.cpp. Params are already checked; the
// launchers only choose the template instance and report the launch status.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/quantize_params.h"

namespace fp4::cuda::detail {

constexpr int kThreads = 256;  // threads per CTA
constexpr int kUnroll = 4;     // 16-byte vectors of the float side per thread

// Launch grid for a [rows, cols] matrix whose float side has `float_bytes`-byte elements.
inline int64_t grid_size(int64_t rows, int64_t cols, int float_bytes) {
  const int64_t vectors = rows * cols / (16 / float_bytes);
  return (vectors + int64_t{kThreads} * kUnroll - 1) / (int64_t{kThreads} * kUnroll);
}

cudaError_t launch_quantize(BlockFormat format, const QuantizeParams& p, unsigned grid,
                            cudaStream_t stream);
cudaError_t launch_dequantize(BlockFormat format, const DequantizeParams& p, unsigned grid,
                              cudaStream_t stream);

}  // namespace fp4::cuda::detail
