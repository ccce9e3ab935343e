// The MXFP8 linear's first kernel (mxfp8_linear.cu): each row of x scaled by a power of two and
// split into FP16 pieces, written in the order the product's MMAs read them.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/mxfp8_linear.h"

namespace fp4::cuda::detail {

constexpr int kSplitThreads = 256;

// A thread's share of a row held in registers between the kernel's two passes: rows of up to
// kHeldVectors * kSplitThreads * 4 values (8,192) are read once, all of a thread's loads in
// flight together, rather than one round trip a loop iteration in each pass.
constexpr int kHeldVectors = 8;

__device__ __forceinline__ uint32_t largest_magnitude(uint32_t largest, float4 v) {
  const uint32_t a = __float_as_uint(v.x) & 0x7FFFFFFFu, b = __float_as_uint(v.y) & 0x7FFFFFFFu;
  const uint32_t c = __float_as_uint(v.z) & 0x7FFFFFFFu, d = __float_as_uint(v.w) & 0x7FFFFFFFu;
  return max(max(largest, max(a, b)), max(c, d));
}

// x's pieces as the product reads them, "fragment order": for each piece, 16-row tile and chunk
// c of 8 values of k, 256 bytes of 16 units, unit (g, j) (g = 0..7, j = 0, 1) holding the A
// registers of one MMA step for rows g and g + 8 at k = 8c + 4j + {0..3}: {row g at k0 k1,
// row g + 8 at k0 k1, row g at k2 k3, row g + 8 at k2 k3}, so that one 16-byte shared-memory
// read is an MMA's A operand as it stands. Unit (g, j) sits at (2g + j) ^ 2 (c mod 4) ^ (g mod 2):
// a block's reads (lane (g, t) at chunk 4b + t) then take 8 distinct 16-byte bank groups in
// each quarter warp. A (piece, tile)'s chunks lie in k order, so a group's 16 are 4 KB in a row.
__host__ __device__ __forceinline__ int fragment_unit(int g, int j, int64_t chunk) {
  return (2 * g + j) ^ (2 * static_cast<int>(chunk % 4)) ^ (g % 2);
}

// Values 4i .. 4i + 3 of row r, already times 2^s, as their pieces: 4 bytes twice a piece, the
// pairs (4i, 4i + 1) and (4i + 2, 4i + 3) of the row's half of their unit.
__device__ __forceinline__ void store_pieces(float4 v, __half* pieces, int64_t tiles, int64_t r, int64_t k, int64_t i) {
  const int64_t tile = r / 16, chunk = i / 2;
  const int g = static_cast<int>(r % 8), half = static_cast<int>(r % 16 / 8), j = static_cast<int>(i % 2);
  float rest[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int piece = 0; piece < kMxfp8LinearPieces; ++piece) {
    __half h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      h[e] = __float2half_rn(rest[e]);
      // Exact: the remainder of a rounding to nearest. A first piece that is not finite carries
      // x alone.
      const bool finite = __hisinf(h[e]) == 0 && !__hisnan(h[e]);
      rest[e] = finite ? rest[e] - __half2float(h[e]) : 0.0f;
    }
    __half* unit = pieces + (((piece * tiles + tile) * (k / 8) + chunk) * 16 + fragment_unit(g, j, chunk)) * 8;
    *reinterpret_cast<__half2*>(unit + 2 * half) = __halves2half2(h[0], h[1]);
    *reinterpret_cast<__half2*>(unit + 4 + 2 * half) = __halves2half2(h[2], h[3]);
  }
}

__device__ __forceinline__ float4 scaled(float4 v, float up) { return make_float4(v.x * up, v.y * up, v.z * up, v.w * up); }

// Row r of x (zero past m): s with max |x 2^s| in [2^14, 2^15), the pieces, factor 2^-s. The
// row's largest magnitude is found on the FP32 bits (non-negative floats order as integers).
__global__ void __launch_bounds__(kSplitThreads) split_rows_kernel(const float* x, int64_t m, int64_t k,
                                                                   int64_t rows, __half* pieces, float* factors) {
  allow_dependent_launch();  // the product's CTAs wait for the pieces themselves
  const int64_t r = blockIdx.x, vectors = k / 4, tiles = rows / 16;  // k a multiple of 128, x 16-byte aligned
  const bool live = r < m;
  const float4* row = reinterpret_cast<const float4*>(x + r * k);
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float4 held[kHeldVectors];
#pragma unroll
  for (int j = 0; j < kHeldVectors; ++j) {
    const int64_t i = threadIdx.x + int64_t{j} * kSplitThreads;
    held[j] = live && i < vectors ? row[i] : zero;
  }
  uint32_t largest = 0;
#pragma unroll
  for (int j = 0; j < kHeldVectors; ++j) largest = largest_magnitude(largest, held[j]);
  for (int64_t i = threadIdx.x + kHeldVectors * kSplitThreads; live && i < vectors; i += kSplitThreads) {
    largest = largest_magnitude(largest, row[i]);
  }
  __shared__ uint32_t warp_max[kSplitThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) largest = max(largest, __shfl_xor_sync(0xFFFFFFFFu, largest, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = largest;
  __syncthreads();
  largest = warp_max[0];
  for (int i = 1; i < kSplitThreads / 32; ++i) largest = max(largest, warp_max[i]);
  // floor(log2 M) from the exponent field; a subnormal M counts as 2^-127, which keeps s <= 141
  // before the cap.
  int s = 0;
  if (largest != 0 && largest < 0x7F800000u) s = min(127, 14 - (static_cast<int>(largest >> 23) - 127));
  const float up = ldexpf(1.0f, s);
#pragma unroll
  for (int j = 0; j < kHeldVectors; ++j) {
    const int64_t i = threadIdx.x + int64_t{j} * kSplitThreads;
    if (i < vectors) store_pieces(scaled(held[j], up), pieces, tiles, r, k, i);
  }
  for (int64_t i = threadIdx.x + kHeldVectors * kSplitThreads; i < vectors; i += kSplitThreads) {
    store_pieces(live ? scaled(row[i], up) : zero, pieces, tiles, r, k, i);
  }
  if (threadIdx.x == 0) factors[r] = ldexpf(1.0f, -s);
}

}  // namespace fp4::cuda::detail
