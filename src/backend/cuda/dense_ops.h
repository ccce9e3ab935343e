// The token-parallel ops of the dense part of a layer on the GPU: the residual add fused with
// RMSNorm, RMSNorm alone, RoPE and row gathers (the embedding, the logit rows, an expert's
// tokens). Same contracts as fp4::cpu's (backend/model_ops.h). The norms sum squares in double
// as the CPU does, so a row's scale equals the CPU's except where the two double sums, added in
// different orders, round to different floats; RoPE's cos and sin are the device's double
// sincos rounded to float. The tests bound both.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/model_ops.h"

namespace fp4::cuda {

// Pointers are device pointers; asynchronous on `stream`.
void rms_norm(const RmsNormParams& p, cudaStream_t stream);
void add_rms_norm(const AddRmsNormParams& p, cudaStream_t stream);
// RoPE: rotary_dim at most 256.
void rope(const RopeParams& p, cudaStream_t stream);
// An id outside the table (which the CPU reference refuses) makes its output row NaN.
void gather_rows(const GatherRowsParams& p, cudaStream_t stream);

namespace detail {

struct NormArgs {
  const float* x = nullptr;      // read
  float* x_out = nullptr;        // x + delta written here (add_rms_norm), or nullptr
  const float* delta = nullptr;  // or nullptr
  const float* weight = nullptr;
  float* y = nullptr;
  int64_t rows = 0;
  int dim = 0;
  float eps = 1e-6f;
  bool gemma = false;
};

constexpr int kMaxRopePairs = 128;
struct RopeArgs {
  float* x = nullptr;
  const int32_t* positions = nullptr;
  int64_t tokens = 0;
  int heads = 0, head_dim = 0, pairs = 0;
  double inv_freq[kMaxRopePairs] = {};
};

cudaError_t launch_norm(const NormArgs& a, cudaStream_t stream);
cudaError_t launch_rope(const RopeArgs& a, cudaStream_t stream);
cudaError_t launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream);
// The BF16-weight linear's halves (CudaBackend::linear): x [n floats] into three BF16 pieces
// out[3][n] with x = out[0] + out[1] + out[2]; and y[i] = parts[i] + (parts[n + i] + parts[2n + i]).
cudaError_t launch_split_bf16x3(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);
cudaError_t launch_sum_thirds(const float* parts, int64_t n, float* y, cudaStream_t stream);

}  // namespace detail
}  // namespace fp4::cuda
