// RMSNorm (with or without the residual add), RoPE and row-gather kernels, and the split and sum
// around the BF16-weight projection. -fmad=false keeps each product and sum rounded as the CPU's.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/dense_ops.h"

namespace fp4::cuda::detail {
namespace {

constexpr int kNormThreads = 256;
constexpr int kGatherThreads = 256;
constexpr int kRopeThreads = 256;
constexpr int kSplitThreads = 256;

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
// be x itself. A thread loads kNormBatch of its elements before it stores any: its stores may
// alias its loads (x_out is x, y may be x), so the compiler would otherwise keep every load
// behind the store before it, one memory round trip per element.
constexpr int kNormBatch = 8;

__global__ void __launch_bounds__(kNormThreads) norm_kernel(const NormArgs a) {
  __shared__ double partial[kNormThreads / 32];
  const int64_t row = blockIdx.x;
  const float* x = a.x + row * a.dim;
  float* x_out = a.x_out != nullptr ? a.x_out + row * a.dim : nullptr;
  const float* delta = a.delta != nullptr ? a.delta + row * a.dim : nullptr;
  double sum_sq = 0.0;
  for (int base = threadIdx.x; base < a.dim; base += kNormBatch * kNormThreads) {
    float v[kNormBatch], d[kNormBatch];
#pragma unroll
    for (int j = 0; j < kNormBatch; ++j) {
      const int i = base + j * kNormThreads;
      v[j] = i < a.dim ? x[i] : 0.0f;
      d[j] = delta != nullptr && i < a.dim ? delta[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kNormBatch; ++j) {
      const int i = base + j * kNormThreads;
      if (i >= a.dim) break;
      if (delta != nullptr) {
        v[j] += d[j];
        x_out[i] = v[j];
      }
      sum_sq += static_cast<double>(v[j]) * v[j];  // exact: a float square fits a double
    }
  }
  const double total = block_sum(sum_sq, partial);
  // rms_norm's expression, in double up to the one rounding to float.
  const float inv = static_cast<float>(1.0 / sqrt(total / a.dim + static_cast<double>(a.eps)));
  const float* src = x_out != nullptr ? x_out : x;
  float* y = a.y + row * a.dim;
  for (int base = threadIdx.x; base < a.dim; base += kNormBatch * kNormThreads) {
    float s[kNormBatch], w[kNormBatch];
#pragma unroll
    for (int j = 0; j < kNormBatch; ++j) {
      const int i = base + j * kNormThreads;
      s[j] = i < a.dim ? src[i] : 0.0f;
      w[j] = i < a.dim ? (a.gemma ? 1.0f + a.weight[i] : a.weight[i]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kNormBatch; ++j) {
      const int i = base + j * kNormThreads;
      if (i < a.dim) y[i] = s[j] * inv * w[j];
    }
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
    const int64_t at = int64_t{id} * p.dim + i;
    out[i] = bad ? __int_as_float(0x7fc00000)
                 : p.table_bf16 != nullptr ? __uint_as_float(uint32_t{p.table_bf16[at]} << 16) : p.table[at];
  }
}

// x = hi + mid + lo, each rounded to BF16 in turn from what the previous left. Each difference
// is exact in FP32 (the remainder of a round to nearest fits in the bits below it), and the last
// remainder has at most 8 significant bits, so lo holds it exactly: the sum is x itself unless
// the pieces fall below BF16's normal range (|x| < 2^-100 or so). Where hi is not finite (x is
// +-inf or NaN, or rounds up past BF16's largest value, |x| >= 0x1.FFp127) hi alone carries it
// and mid and lo are 0, so the product is what x's own would be: +-inf or NaN.
__global__ void __launch_bounds__(kSplitThreads) split_bf16x3_kernel(const float* x, int64_t n,
                                                                     __nv_bfloat16* out) {
  const int64_t i = int64_t{blockIdx.x} * kSplitThreads + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  const __nv_bfloat16 hi = __float2bfloat16_rn(v);
  const bool finite = isfinite(__bfloat162float(hi));
  const float r1 = finite ? v - __bfloat162float(hi) : 0.0f;
  const __nv_bfloat16 mid = __float2bfloat16_rn(r1);
  const float r2 = r1 - __bfloat162float(mid);
  out[i] = hi;
  out[n + i] = mid;
  out[2 * n + i] = __float2bfloat16_rn(r2);
}

// y = hi part + (mid part + lo part): the small ones first, so they lose the least.
__global__ void __launch_bounds__(kSplitThreads) sum_thirds_kernel(const float* parts, int64_t n, float* y) {
  const int64_t i = int64_t{blockIdx.x} * kSplitThreads + threadIdx.x;
  if (i < n) y[i] = parts[i] + (parts[n + i] + parts[2 * n + i]);
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

cudaError_t launch_split_bf16x3(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  split_bf16x3_kernel<<<static_cast<unsigned>((n + kSplitThreads - 1) / kSplitThreads), kSplitThreads, 0,
                        stream>>>(x, n, reinterpret_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

cudaError_t launch_sum_thirds(const float* parts, int64_t n, float* y, cudaStream_t stream) {
  sum_thirds_kernel<<<static_cast<unsigned>((n + kSplitThreads - 1) / kSplitThreads), kSplitThreads, 0,
                      stream>>>(parts, n, y);
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
