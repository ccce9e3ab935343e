// RMSNorm (with or without the residual add), RoPE and row-gather kernels. -fmad=false keeps
// each product and sum rounded as the CPU's.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/dense_ops.h"

namespace fp4::cuda::detail {
namespace {

constexpr int kNormThreads = 256;
constexpr int kGatherThreads = 256;
constexpr int kRopeThreads = 256;

__device__ __forceinline__ double block_sum(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kNormThreads / 32; ++w) total += shared[w];
  return total;
}

// One CTA per row. Each thread adds (when asked) and squares its strided elements, writing the
// sum back before the reduction; after it, the same thread scales the same elements, so y may
// be x itself.
__global__ void __launch_bounds__(kNormThreads) norm_kernel(const NormArgs a) {
  __shared__ double partial[kNormThreads / 32];
  const int64_t row = blockIdx.x;
  const float* x = a.x + row * a.dim;
  float* x_out = a.x_out != nullptr ? a.x_out + row * a.dim : nullptr;
  const float* delta = a.delta != nullptr ? a.delta + row * a.dim : nullptr;
  double sum_sq = 0.0;
  for (int i = threadIdx.x; i < a.dim; i += kNormThreads) {
    float v = x[i];
    if (delta != nullptr) {
      v += delta[i];
      x_out[i] = v;
    }
    sum_sq += static_cast<double>(v) * v;  // exact: a float square fits a double
  }
  const double total = block_sum(sum_sq, partial);
  // rms_norm's expression, in double up to the one rounding to float.
  const float inv = static_cast<float>(1.0 / sqrt(total / a.dim + static_cast<double>(a.eps)));
  const float* src = x_out != nullptr ? x_out : x;
  float* y = a.y + row * a.dim;
  for (int i = threadIdx.x; i < a.dim; i += kNormThreads) {
    const float w = a.gemma ? 1.0f + a.weight[i] : a.weight[i];
    y[i] = src[i] * inv * w;
  }
}

// One thread per (token, head, pair), rope's arithmetic: angle in double, cos and sin rounded
// to float, then the rotation in float.
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const RopeArgs a) {
  const int64_t i = int64_t{blockIdx.x} * kRopeThreads + threadIdx.x;
  if (i >= a.tokens * a.heads * a.pairs) return;
  const int j = static_cast<int>(i % a.pairs);
  const int64_t vec = i / a.pairs, t = vec / a.heads;
  double s, c;
  sincos(static_cast<double>(a.positions[t]) * a.inv_freq[j], &s, &c);
  const float cos_f = static_cast<float>(c), sin_f = static_cast<float>(s);
  float* x = a.x + vec * a.head_dim;
  const float x0 = x[j], x1 = x[j + a.pairs];
  x[j] = x0 * cos_f - x1 * sin_f;
  x[j + a.pairs] = x1 * cos_f + x0 * sin_f;
}

__global__ void __launch_bounds__(kGatherThreads) gather_rows_kernel(const GatherRowsParams p) {
  const int64_t row = blockIdx.x;
  const int32_t id = p.ids[row];
  const bool bad = id < 0 || id >= p.table_rows;
  float* out = p.out + row * p.dim;
  for (int64_t i = threadIdx.x; i < p.dim; i += kGatherThreads) {
    out[i] = bad ? __int_as_float(0x7fc00000) : p.table[int64_t{id} * p.dim + i];
  }
}

}  // namespace

cudaError_t launch_norm(const NormArgs& a, cudaStream_t stream) {
  norm_kernel<<<static_cast<unsigned>(a.rows), kNormThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_rope(const RopeArgs& a, cudaStream_t stream) {
  const int64_t n = a.tokens * a.heads * a.pairs;
  rope_kernel<<<static_cast<unsigned>((n + kRopeThreads - 1) / kRopeThreads), kRopeThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  gather_rows_kernel<<<static_cast<unsigned>(p.count), kGatherThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
