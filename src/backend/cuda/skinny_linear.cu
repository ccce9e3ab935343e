// See skinny_linear.h. A CTA owns kRowsPerCta weight rows over the whole of k: its threads
// stride over the rows' chunks of 8 values (16 bytes of BF16, 8 of MXFP8 codes and their
// block's scale byte), a warp's loads 512 (256) contiguous bytes of a row, and every thread
// keeps kRowsPerCta x M partial sums. x is small and read by every CTA, so it comes through L1
// while the weight's loads skip it. The partial sums are reduced in a fixed order (warp
// shuffles, then the warps in turn), so a result does not depend on timing.
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
// Chunks of each row a thread loads before it multiplies: kRowsPerCta x kUnroll loads in flight
// a thread, 32 KB a CTA in either form (MXFP8 chunks are half the bytes, so twice as many). A
// thread takes chunks threadIdx.x, + kThreads, + 2 kThreads, ... in that order whatever the
// unroll, so both forms sum alike. Up to 4 rows of x a thread needs at most 128 registers, so
// two CTAs share an SM; past that, one (about 160 registers; capped at 128, ptxas spills). With
// one CTA an SM and x read through L1 by every 4 rows, 8 rows of x stream a wide weight at
// about half the copy bandwidth: those shapes go elsewhere (skinny_linear_fits).
template <bool kMx> constexpr int kUnroll = kMx ? 4 : 2;
template <int M> constexpr int kCtasPerSm = M <= 4 ? 2 : 1;

// A chunk as loaded: 16 bytes of BF16, or 8 bytes of codes and the block's scale.
template <bool kMx> struct Chunk;
template <> struct Chunk<false> {
  uint4 v;
};
template <> struct Chunk<true> {
  uint2 codes;
  uint32_t scale;
};

template <bool kMx>
__device__ __forceinline__ Chunk<kMx> load_chunk(const SkinnyLinearArgs& a, int64_t row, int c) {
  if constexpr (kMx) {
    return {load_streaming8(a.w_e4m3 + row * a.k + 8 * c), load_streaming1(a.w_scales + row * (a.k / 32) + c / 4)};
  } else {
    return {load_streaming16(a.w + row * a.k + 8 * c)};
  }
}

// The chunk's 8 values as exact FP32s: a BF16 is the top half of its FP32; an E4M3 is exact in
// FP16 and then in FP32, and times its power-of-two scale exact too (the smallest product,
// 2^-9 x 2^-127, is an FP32 subnormal; the build keeps subnormals).
template <bool kMx>
__device__ __forceinline__ void expand(const Chunk<kMx>& ch, float out[8]) {
  if constexpr (kMx) {
    const float scale = ue8m0_decode(static_cast<uint8_t>(ch.scale));
    const uint32_t words[2] = {ch.codes.x, ch.codes.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t pair;
        asm("{\n .reg .b16 t;\n cvt.u16.u32 t, %1;\n cvt.rn.f16x2.e4m3x2 %0, t;\n}\n"
            : "=r"(pair)
            : "r"(words[i] >> (16 * h)));
        const __half2 v = *reinterpret_cast<const __half2*>(&pair);
        out[4 * i + 2 * h] = __low2float(v) * scale;
        out[4 * i + 2 * h + 1] = __high2float(v) * scale;
      }
    }
  } else {
    const uint32_t words[4] = {ch.v.x, ch.v.y, ch.v.z, ch.v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(words[i] << 16);
      out[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    }
  }
}

template <int M, bool kMx>
__global__ void __launch_bounds__(kThreads, kCtasPerSm<M>) skinny_linear_kernel(const SkinnyLinearGroup g) {
  constexpr int kU = kUnroll<kMx>;
  int part = 0;
  while (part + 1 < g.count && blockIdx.x >= g.first_cta[part + 1]) ++part;
  const SkinnyLinearArgs& a = g.parts[part];
  const int64_t first_row = (int64_t{blockIdx.x} - g.first_cta[part]) * kRowsPerCta;
  const int chunks = static_cast<int>(a.k / 8);  // k < 2^31 (skinny_linear_fits)
  const int rows = static_cast<int>(min(int64_t{kRowsPerCta}, a.n - first_row));  // the last CTA's may be fewer
  float acc[kRowsPerCta][M] = {};
  for (int c0 = threadIdx.x; c0 < chunks; c0 += kU * kThreads) {
    Chunk<kMx> wv[kU][kRowsPerCta];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = c0 + u * kThreads;
#pragma unroll
      for (int r = 0; r < kRowsPerCta; ++r) {
        wv[u][r] = r < rows && c < chunks ? load_chunk<kMx>(a, first_row + r, c) : Chunk<kMx>{};
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = c0 + u * kThreads;
      if (c >= chunks) break;
      float wf[kRowsPerCta][8];
#pragma unroll
      for (int r = 0; r < kRowsPerCta; ++r) expand<kMx>(wv[u][r], wf[r]);
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

template <int M>
cudaError_t launch(const SkinnyLinearGroup& g, cudaStream_t stream) {
  const auto ctas = static_cast<unsigned>(g.first_cta[g.count]);
  if (g.parts[0].w_e4m3 != nullptr) {
    skinny_linear_kernel<M, true><<<ctas, kThreads, 0, stream>>>(g);
  } else {
    skinny_linear_kernel<M, false><<<ctas, kThreads, 0, stream>>>(g);
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
