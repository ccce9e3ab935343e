// Routed experts' NVFP4 matmul for one decode token's experts, on the CUDA cores in FP32
// (expert_gemm.h kSkinny; design and numerics: docs/kernels/expert_gemm.md). At one row an
// expert the tensor-core kernels use one column of eight of their MMAs, and their warps each
// stream 16 features through a shared-memory ring from start to end of k; here each warp holds
// 4 features and its lanes load the weights straight into registers, 512 contiguous bytes of a
// feature a load, a chunk ahead, so that a CTA is short and many are in flight.
//
// Grid (n / 32, slots for the experts that can have rows), 8 warps a CTA, warp w owning
// features 4w .. 4w + 3 of the CTA's 32. Lane l takes the 16-byte chunks l, l + 32, .. of each
// feature's codes (32 values, two 16-value blocks, and the two block scales beside them). The
// expert's rows are taken one at a time: the row is copied into shared memory in FP32 by the
// whole CTA (each chunk's 32 activations as eight 16-byte pieces, piece i of every chunk side by
// side, so that a warp's reads of piece i are 512 contiguous bytes), and the weights are
// streamed once per row. More than one row an expert (never at one token, whose experts are
// distinct) streams them again, from L2 mostly.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/expert_gemm.h"
#include "backend/cuda/expert_rows.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/streaming_loads.cuh"

namespace fp4::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kFeaturesPerWarp = 4;
constexpr int kFeaturesPerCta = kWarps * kFeaturesPerWarp;
static_assert(kExpertGemmRows % kFeaturesPerCta == 0, "the launcher's n is a multiple of kExpertGemmRows");
// Chunks of each feature a lane has in flight while it multiplies one, and CTAs an SM. Measured
// on an H100 at one token (bench/RESULTS.md, graph rows): one chunk ahead at 3 CTAs an SM (80
// registers, 40 bytes spilled) against two ahead at 2 (128 registers, no spill), down [6144, 3072]
// 20.1-20.5 us against 23.2-23.3, gate + up [6144, 6144] 35.7-37.1 against 36.2-36.4 (the
// same within the spread of two rows of one kernel). At k = 3072 a lane has only 3 chunks of a
// feature; the likely reason (not measured apart) is that such short CTAs spend much of their
// time on fixed costs (the expert search, the row's copy, the lanes' sums), which a third CTA an
// SM overlaps.
constexpr int kAhead = 1;
constexpr int kCtasPerSm = 3;

struct Chunk {
  uint4 codes[kFeaturesPerWarp];            // 32 E2M1 values a feature, value i in nibble i
  unsigned short scales[kFeaturesPerWarp];  // the two blocks' E4M3 scales, the first in the low byte
};

// The next chunks of a warp's features for one lane: a code and a scale pointer per feature,
// moved along by a whole warp's chunks at a time (worked out once, not per load).
struct LaneWeights {
  const uint8_t* codes[kFeaturesPerWarp];
  const uint8_t* scales[kFeaturesPerWarp];

  __device__ __forceinline__ Chunk next(bool valid) {
    Chunk c;
#pragma unroll
    for (int f = 0; f < kFeaturesPerWarp; ++f) {
      c.codes[f] = valid ? load_streaming16(codes[f]) : make_uint4(0, 0, 0, 0);
      c.scales[f] = valid ? load_streaming2(scales[f]) : 0;
      codes[f] += 32 * 16;
      scales[f] += 32 * 2;
    }
    return c;
  }
};

__device__ __forceinline__ float2 f16x2_to_float2(uint32_t h) {
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// acc[f] += (the chunk of feature f) . (the row's 32 activations of chunk c), in units of 2^-14
// (the E2M1 expansion's): each 16-value block's products summed first, then times its scale.
__device__ __forceinline__ void accumulate(const Chunk& ch, const float4* xs, int chunk, int chunks,
                                           float acc[kFeaturesPerWarp]) {
  float2 scale[kFeaturesPerWarp];
#pragma unroll
  for (int f = 0; f < kFeaturesPerWarp; ++f) scale[f] = f16x2_to_float2(tc::e4m3x2_to_f16x2(ch.scales[f]));
  float part[kFeaturesPerWarp];
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // values 8q .. 8q + 7 of the chunk: word q of the codes
    const float4 lo = xs[2 * q * chunks + chunk], hi = xs[(2 * q + 1) * chunks + chunk];
    const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int f = 0; f < kFeaturesPerWarp; ++f) {
      const uint32_t words[4] = {ch.codes[f].x, ch.codes[f].y, ch.codes[f].z, ch.codes[f].w};
      uint32_t h[4];  // (v0, v2), (v4, v6), (v1, v3), (v5, v7), each the value times 2^-14
      tc::e2m1x8_to_f16x2_permuted(words[q], h);
      const float2 a = f16x2_to_float2(h[0]), b = f16x2_to_float2(h[1]), c = f16x2_to_float2(h[2]),
                   d = f16x2_to_float2(h[3]);
      float s = q % 2 == 0 ? 0.0f : part[f];
      s = fmaf(x[0], a.x, s);
      s = fmaf(x[2], a.y, s);
      s = fmaf(x[4], b.x, s);
      s = fmaf(x[6], b.y, s);
      s = fmaf(x[1], c.x, s);
      s = fmaf(x[3], c.y, s);
      s = fmaf(x[5], d.x, s);
      s = fmaf(x[7], d.y, s);
      part[f] = s;
      if (q % 2 == 1) acc[f] = fmaf(s, q == 1 ? scale[f].x : scale[f].y, acc[f]);
    }
  }
}

__global__ void __launch_bounds__(kThreads, kCtasPerSm) expert_gemm_skinny_kernel(const ExpertGemmParams p) {
  // One row of x in FP32: values 4i .. 4i + 3 of chunk c (i = 0 .. 7) at i * chunks + c.
  extern __shared__ float4 xs[];
  // The next kernel's CTAs may take the SMs this grid's last CTAs leave free; they wait for
  // this one's outputs themselves.
  allow_dependent_launch();
  // The row offsets come from the dispatch, launches before the one this kernel follows, and the
  // weights from no kernel: both are read before the wait; x only after it.
  const ExpertRows mine = find_expert(p.row_offsets, p.experts, p.rows, static_cast<int>(blockIdx.y));
  if (mine.expert < 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunks = static_cast<int>(p.k / 32);  // k <= 12,288 (the launcher's shared-memory limit)
  const int64_t feature0 = int64_t{blockIdx.x} * kFeaturesPerCta + warp * kFeaturesPerWarp;
  const int64_t first_feature = int64_t{mine.expert} * p.n + feature0;
  // The expansion yields the values times 2^-14; g 2^14 is one rounding (exact unless g is
  // within 2^14 of FP32's limits).
  const float out_scale = p.global_scales[mine.expert] * 16384.0f;
  for (int row = mine.first; row < mine.last; ++row) {
    LaneWeights weights;
#pragma unroll
    for (int f = 0; f < kFeaturesPerWarp; ++f) {
      weights.codes[f] = p.values + (first_feature + f) * (p.k / 2) + 16 * lane;
      weights.scales[f] = p.scales + (first_feature + f) * (p.k / 16) + 2 * lane;
    }
    Chunk ahead[kAhead];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) ahead[i] = weights.next(lane + 32 * i < chunks);
    if (row == mine.first) wait_for_prerequisite_grid();  // x is the kernel before's output
    __syncthreads();  // the previous row's readers are done with xs
    const uint4* x_row = reinterpret_cast<const uint4*>(p.x + int64_t{row} * p.k);
    for (int i = threadIdx.x; i < 4 * chunks; i += kThreads) {
      const uint4 v = x_row[i];  // values 8q .. 8q + 7 of chunk c
      const int c = i / 4, q = i % 4;
      xs[2 * q * chunks + c] = make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xFFFF0000u),
                                           __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xFFFF0000u));
      xs[(2 * q + 1) * chunks + c] = make_float4(__uint_as_float(v.z << 16), __uint_as_float(v.z & 0xFFFF0000u),
                                                 __uint_as_float(v.w << 16), __uint_as_float(v.w & 0xFFFF0000u));
    }
    __syncthreads();
    float acc[kFeaturesPerWarp] = {};
#pragma unroll kAhead  // with chunks ahead, renames them instead of moving them
    for (int c = lane; c < chunks; c += 32) {
      const Chunk now = ahead[0];
#pragma unroll
      for (int i = 0; i + 1 < kAhead; ++i) ahead[i] = ahead[i + 1];
      ahead[kAhead - 1] = weights.next(c + 32 * kAhead < chunks);
      accumulate(now, xs, c, chunks, acc);
    }
    // Fixed-order sums over the lanes, so that a result does not depend on timing.
#pragma unroll
    for (int f = 0; f < kFeaturesPerWarp; ++f) {
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) acc[f] += __shfl_xor_sync(0xFFFFFFFFu, acc[f], offset);
    }
    if (lane < kFeaturesPerWarp) {
      float sum = acc[0];
#pragma unroll
      for (int f = 1; f < kFeaturesPerWarp; ++f) sum = lane == f ? acc[f] : sum;
      p.y[int64_t{row} * p.n + feature0 + lane] = sum * out_scale;
    }
  }
}

}  // namespace

cudaError_t launch_expert_gemm_skinny(const ExpertGemmParams& p, cudaStream_t stream) {
  const size_t smem = expert_gemm_skinny_smem_bytes(p.k);
  if (smem > kExpertGemmSkinnyMaxSmem || p.n % kFeaturesPerCta != 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(p.n / kFeaturesPerCta), static_cast<unsigned>(expert_gemm_expert_slots(p)));
  // A programmatic dependent of the kernel before: its launch, its expert search and its first
  // weight loads overlap that kernel's end.
  return launch_dependent(expert_gemm_skinny_kernel, grid, dim3(kThreads), smem, stream, p);
}

}  // namespace fp4::cuda::detail
