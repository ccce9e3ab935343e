// See skinny_linear.h. A CTA owns kRowsPerCta weight rows over the whole of k: its threads
// stride over the rows' 16-byte chunks (8 BF16 values, or 16 MXFP8 codes and their block's scale
// byte), a warp's loads 512 contiguous bytes of a row, and every thread keeps kRowsPerCta x M
// partial sums. x is small and read by every CTA, so it comes through L1 while the weight's
// loads skip it. The partial sums are reduced in a fixed order (warp shuffles, then the warps
// in turn), so a result does not depend on timing.
#include "backend/cuda/skinny_linear.h"

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/streaming_loads.cuh"
#include "formats/minifloat.h"

namespace fp4::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerCta = 4;

// The CTA's partial sums reduced in a fixed order (warp shuffles, then the warps in turn) and
// stored.
template <int M>
__device__ __forceinline__ void reduce_and_store(float (&acc)[kRowsPerCta][M], const SkinnyLinearArgs& a,
                                                 int64_t first_row, int rows) {
  __shared__ float partial[kWarps][kRowsPerCta * M];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int r = 0; r < kRowsPerCta; ++r) {
#pragma unroll
    for (int t = 0; t < M; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
      if (lane == 0) partial[warp][r * M + t] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x < kRowsPerCta * M) {
    const int r = threadIdx.x / M, t = threadIdx.x % M;
    float sum = partial[0][threadIdx.x];
#pragma unroll
    for (int i = 1; i < kWarps; ++i) sum += partial[i][threadIdx.x];
    if (r < rows) a.y[t * a.n + first_row + r] = sum;
  }
}

// Chunks of each row a thread loads before it multiplies: kRowsPerCta x kUnroll 16-byte loads in
// flight a thread, 32 KB a CTA. Up to 4 rows of x a thread needs at most 128 registers, so two
// CTAs share an SM; past that, one (about 160 registers; capped at 128, ptxas spills). With one
// CTA an SM and x read through L1 by every 4 rows, 8 rows of x stream a wide weight at about half
// the copy bandwidth: those shapes go elsewhere (skinny_linear_fits).
constexpr int kUnroll = 2;
template <int M> constexpr int kCtasPerSm = M <= 4 ? 2 : 1;

// BF16: a chunk is 8 values (16 bytes); a BF16 is the top half of its FP32.
template <int M>
__global__ void __launch_bounds__(kThreads, kCtasPerSm<M>) skinny_linear_kernel(const SkinnyLinearGroup g) {
  int part = 0;
  while (part + 1 < g.count && blockIdx.x >= g.first_cta[part + 1]) ++part;
  const SkinnyLinearArgs& a = g.parts[part];
  const int64_t first_row = (int64_t{blockIdx.x} - g.first_cta[part]) * kRowsPerCta;
  const int chunks = static_cast<int>(a.k / 8);  // k < 2^31 (skinny_linear_fits)
  const uint16_t* w = a.w + first_row * a.k;
  const int rows = static_cast<int>(min(int64_t{kRowsPerCta}, a.n - first_row));  // the last CTA's may be fewer
  float acc[kRowsPerCta][M] = {};
  for (int c0 = threadIdx.x; c0 < chunks; c0 += kUnroll * kThreads) {
    uint4 wv[kUnroll][kRowsPerCta];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
#pragma unroll
      for (int r = 0; r < kRowsPerCta; ++r) {
        wv[u][r] = r < rows && c < chunks ? load_streaming16(w + r * a.k + 8 * c) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) break;
      float wf[kRowsPerCta][8];
#pragma unroll
      for (int r = 0; r < kRowsPerCta; ++r) {
        const uint32_t words[4] = {wv[u][r].x, wv[u][r].y, wv[u][r].z, wv[u][r].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          wf[r][2 * i] = __uint_as_float(words[i] << 16);
          wf[r][2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
        }
      }
#pragma unroll
      for (int t = 0; t < M; ++t) {
        const float4* xt = reinterpret_cast<const float4*>(a.x + t * a.k + 8 * c);
        const float4 x0 = __ldg(xt), x1 = __ldg(xt + 1);
        const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int r = 0; r < kRowsPerCta; ++r) {
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[r][t] = fmaf(wf[r][i], xs[i], acc[r][t]);
        }
      }
    }
  }
  reduce_and_store<M>(acc, a, first_row, rows);
}

// MXFP8: a chunk is 16 values (16 code bytes, half a block) and its block's scale byte. A code
// becomes its value by the hardware E4M3 -> FP16x2 conversion and the FP16 -> FP32 one (exact);
// the chunk's 16 products with each row of x are summed from zero and the sum times the scale
// (a power of two) added to the row's partial sum by one fused multiply-add. Scaling by a power
// of two commutes with rounding, so this is the sum of x times the weight's values, rounded
// as a tree of k additions, unless a chunk's sum overflows or falls below FP32's normal range
// (|x| past about 2^115 or below 2^-117).
// Two chunks of each row in flight a thread up to 2 rows of x; one past that (at two, ptxas
// spilled from 3 rows on).
template <int M> constexpr int kMxUnroll = M <= 2 ? 2 : 1;

template <int M>
__global__ void __launch_bounds__(kThreads, kCtasPerSm<M>) skinny_linear_mx_kernel(const SkinnyLinearGroup g) {
  constexpr int kUnroll = kMxUnroll<M>;
  int part = 0;
  while (part + 1 < g.count && blockIdx.x >= g.first_cta[part + 1]) ++part;
  const SkinnyLinearArgs& a = g.parts[part];
  const int64_t first_row = (int64_t{blockIdx.x} - g.first_cta[part]) * kRowsPerCta;
  const int chunks = static_cast<int>(a.k / 16);
  const uint8_t* w = a.w_e4m3 + first_row * a.k;
  const uint8_t* scales = a.w_scales + first_row * (a.k / 32);
  const int rows = static_cast<int>(min(int64_t{kRowsPerCta}, a.n - first_row));
  float acc[kRowsPerCta][M] = {};
  for (int c0 = threadIdx.x; c0 < chunks; c0 += kUnroll * kThreads) {
    uint4 wv[kUnroll][kRowsPerCta];
    uint32_t sv[kUnroll][kRowsPerCta];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
#pragma unroll
      for (int r = 0; r < kRowsPerCta; ++r) {
        const bool live = r < rows && c < chunks;
        wv[u][r] = live ? load_streaming16(w + r * a.k + 16 * c) : make_uint4(0, 0, 0, 0);
        sv[u][r] = live ? load_streaming1(scales + r * (a.k / 32) + c / 2) : 0u;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) break;
#pragma unroll
      for (int r = 0; r < kRowsPerCta; ++r) {
        float wf[16];
        const uint32_t words[4] = {wv[u][r].x, wv[u][r].y, wv[u][r].z, wv[u][r].w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          uint32_t pair;
          asm("{\n .reg .b16 t;\n cvt.u16.u32 t, %1;\n cvt.rn.f16x2.e4m3x2 %0, t;\n}\n"
              : "=r"(pair)
              : "r"(words[i / 2] >> (16 * (i % 2))));
          const __half2 v = *reinterpret_cast<const __half2*>(&pair);
          wf[2 * i] = __low2float(v);
          wf[2 * i + 1] = __high2float(v);
        }
        const float scale = ue8m0_decode(static_cast<uint8_t>(sv[u][r]));
#pragma unroll
        for (int t = 0; t < M; ++t) {
          const float4* xt = reinterpret_cast<const float4*>(a.x + t * a.k + 16 * c);
          float sum = 0.0f;
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const float4 xq = __ldg(xt + q);
            sum = fmaf(wf[4 * q], xq.x, sum);
            sum = fmaf(wf[4 * q + 1], xq.y, sum);
            sum = fmaf(wf[4 * q + 2], xq.z, sum);
            sum = fmaf(wf[4 * q + 3], xq.w, sum);
          }
          acc[r][t] = fmaf(sum, scale, acc[r][t]);
        }
      }
    }
  }
  reduce_and_store<M>(acc, a, first_row, rows);
}

template <int M>
cudaError_t launch(const SkinnyLinearGroup& g, cudaStream_t stream) {
  const auto ctas = static_cast<unsigned>(g.first_cta[g.count]);
  if (g.parts[0].w_e4m3 != nullptr) {
    skinny_linear_mx_kernel<M><<<ctas, kThreads, 0, stream>>>(g);
  } else {
    skinny_linear_kernel<M><<<ctas, kThreads, 0, stream>>>(g);
  }
  return cudaGetLastError();
}

}  // namespace

bool skinny_linear_fits(const SkinnyLinearArgs& a) {
  const auto misaligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; };
  const bool mx = a.w_e4m3 != nullptr;
  if (mx == (a.w != nullptr) || (mx && a.w_scales == nullptr)) return false;
  const bool sizes = a.n >= 1 && a.k >= 8 && a.k % (mx ? 32 : 8) == 0 && a.k <= int64_t{0x7FFFFFFF} &&
                     (a.n + kRowsPerCta - 1) / kRowsPerCta <= int64_t{0x7FFFFFFF};
  if (!sizes || misaligned(a.x) || misaligned(mx ? static_cast<const void*>(a.w_e4m3) : a.w) || a.m < 1) {
    return false;
  }
  return a.m <= kSkinnyMaxRows || (a.m <= kSkinnyNarrowMaxRows && a.n * a.k * 2 <= kSkinnyNarrowBytes);
}

cudaError_t launch_skinny_linear(const SkinnyLinearArgs& a, cudaStream_t stream) {
  return launch_skinny_linear_group(&a, 1, stream);
}

cudaError_t launch_skinny_linear_group(const SkinnyLinearArgs* parts, int count, cudaStream_t stream) {
  if (count < 1 || count > kSkinnyMaxParts) return cudaErrorInvalidValue;
  SkinnyLinearGroup g;
  g.count = count;
  for (int i = 0; i < count; ++i) {
    const SkinnyLinearArgs& a = parts[i];
    if (!skinny_linear_fits(a) || a.x != parts[0].x || a.m != parts[0].m || a.k != parts[0].k ||
        (a.w_e4m3 != nullptr) != (parts[0].w_e4m3 != nullptr)) {
      return cudaErrorInvalidValue;
    }
    g.parts[i] = a;
    g.first_cta[i + 1] = g.first_cta[i] + (a.n + kRowsPerCta - 1) / kRowsPerCta;
  }
  if (g.first_cta[count] > int64_t{0x7FFFFFFF}) return cudaErrorInvalidValue;
  switch (parts[0].m) {
    case 1: return launch<1>(g, stream);
    case 2: return launch<2>(g, stream);
    case 3: return launch<3>(g, stream);
    case 4: return launch<4>(g, stream);
    case 5: return launch<5>(g, stream);
    case 6: return launch<6>(g, stream);
    case 7: return launch<7>(g, stream);
    default: return launch<8>(g, stream);
  }
}

}  // namespace fp4::cuda::detail
