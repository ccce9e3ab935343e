// Routed experts' grouped matmul, NVFP4 weights x BF16 activations on mma.sync m16n8k16 (BF16
// in, FP32 accumulation). Design and numerics: docs/kernels/expert_gemm.md.
//
// Grid (n / 64, experts); a CTA computes 64 output features of one expert for all of its
// tokens, in passes of up to 32 tokens (four 8-token MMA tiles). Warp w owns features
// [16w, 16w + 16): they are the MMA's 16 rows (A), the tokens its 8 columns (B). A lane (grp,
// tig) reads, for features grp and grp + 8, 16 contiguous code bytes (32 values) of each
// 128-value block of k, and the two block scales they need. The MMA's k positions are permuted
// to match: in k-step j of a 128-value block, positions 2tig, 2tig + 1, 2tig + 8, 2tig + 9 are
// stored values 32tig + 4j + 0, 1, 2, 3 for both A and B, so every lane's fragments come from
// whole 16-byte loads. The next 256 values of the weights (128 in a last, half step when k is
// 128 mod 256) are in flight while the current ones are multiplied.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/expert_gemm.h"
#include "backend/cuda/mma.cuh"
#include "formats/minifloat.h"

namespace fp4::cuda::detail {
namespace {

constexpr int kTiles = 4;          // 8-token tiles per pass
constexpr int kBlocksPerStep = kExpertGemmStepK / 128;

// One step's raw weights of a lane: for features grp (f = 0) and grp + 8 (f = 1), 16 code bytes
// and 2 scale bytes of each 128-value block.
struct Raw {
  uint4 codes[2][kBlocksPerStep];
  uint32_t scales[2][kBlocksPerStep];
};

// kHalfTail: k = 128 (mod 256), so the last step has one block; the check stays out of the
// common kernel, where it cost time (bench/RESULTS.md).
template <bool kHalfTail>
__device__ __forceinline__ void load_raw(Raw& r, const uint8_t* const codes[2], const uint8_t* const scales[2],
                                         int step, int blocks) {
#pragma unroll
  for (int f = 0; f < 2; ++f) {
#pragma unroll
    for (int b = 0; b < kBlocksPerStep; ++b) {
      const int block = step * kBlocksPerStep + b;
      if (kHalfTail && block >= blocks) break;
      r.codes[f][b] = __ldg(reinterpret_cast<const uint4*>(codes[f] + 64 * block));
      r.scales[f][b] = __ldg(reinterpret_cast<const uint16_t*>(scales[f] + 8 * block));
    }
  }
}

// The A fragments of one 128-value block: a[j] for its 8 k-steps (see the top of the file).
__device__ __forceinline__ void block_fragments(const Raw& r, int b, uint32_t a[8][4]) {
#pragma unroll
  for (int f = 0; f < 2; ++f) {
    const uint32_t s = r.scales[f][b];
    const uint32_t sf_lo = tc::pack_bf16(e4m3_decode(static_cast<uint8_t>(s)), e4m3_decode(static_cast<uint8_t>(s)));
    const uint32_t sf_hi =
        tc::pack_bf16(e4m3_decode(static_cast<uint8_t>(s >> 8)), e4m3_decode(static_cast<uint8_t>(s >> 8)));
    const uint32_t w[4] = {r.codes[f][b].x, r.codes[f][b].y, r.codes[f][b].z, r.codes[f][b].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // word i: stored values 8i .. 8i + 7 of the lane's 32
      uint32_t pairs[4];
      tc::e2m1x8_to_bf16x2(w[i], pairs);
      const uint32_t sf = i < 2 ? sf_lo : sf_hi;  // values 0-15: the first block scale
#pragma unroll
      for (int e = 0; e < 4; ++e) pairs[e] = tc::mul_bf16x2(pairs[e], sf);  // exact
      // k-step 2i takes stored values 8i .. 8i + 3, k-step 2i + 1 takes 8i + 4 .. 8i + 7.
      a[2 * i][f] = pairs[0];
      a[2 * i][2 + f] = pairs[1];
      a[2 * i + 1][f] = pairs[2];
      a[2 * i + 1][2 + f] = pairs[3];
    }
  }
}

template <bool kHalfTail>
__global__ void __launch_bounds__(kExpertGemmThreads) expert_gemm_kernel(const ExpertGemmParams p) {
  const int e = blockIdx.y;
  // The offsets are device data the host cannot check: clamped to the rows, so that corrupt ones
  // cost outputs, never memory outside x and y.
  const int first = max(p.row_offsets[e], 0), last = min(p.row_offsets[e + 1], static_cast<int>(p.rows));
  if (first >= last) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, grp = lane / 4, tig = lane % 4;
  const int64_t feature0 = int64_t{blockIdx.x} * kExpertGemmRows + warp * 16;
  const uint8_t* codes[2];
  const uint8_t* scales[2];
#pragma unroll
  for (int f = 0; f < 2; ++f) {
    const int64_t row = int64_t{e} * p.n + feature0 + grp + 8 * f;
    codes[f] = p.values + row * (p.k / 2) + 16 * tig;
    scales[f] = p.scales + row * (p.k / 16) + 2 * tig;
  }
  const float g = p.global_scales[e];
  const int blocks = static_cast<int>(p.k / 128);
  const int steps = (blocks + kBlocksPerStep - 1) / kBlocksPerStep;

  for (int pass = first; pass < last; pass += 8 * kTiles) {
    const int tokens = min(8 * kTiles, last - pass);
    float acc[kTiles][4] = {};
    Raw cur, nxt;
    load_raw<kHalfTail>(cur, codes, scales, 0, blocks);
    for (int step = 0; step < steps; ++step) {
      if (step + 1 < steps) load_raw<kHalfTail>(nxt, codes, scales, step + 1, blocks);
#pragma unroll
      for (int b = 0; b < kBlocksPerStep; ++b) {
        if (kHalfTail && step * kBlocksPerStep + b >= blocks) break;  // uniform across the CTA
        uint32_t a[8][4];
        block_fragments(cur, b, a);
        const int64_t k0 = int64_t{step} * kExpertGemmStepK + 128 * b + 32 * tig;
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          if (8 * t >= tokens) break;  // uniform across the CTA
          // This lane's token of the tile: its 32 activations at k0 (zeros past the last token).
          const int token = 8 * t + grp;
          uint4 xv[4] = {};
          if (token < tokens) {
            const uint4* src = reinterpret_cast<const uint4*>(p.x + (int64_t{pass} + token) * p.k + k0);
#pragma unroll
            for (int v = 0; v < 4; ++v) xv[v] = __ldg(src + v);
          }
          const uint32_t xb[16] = {xv[0].x, xv[0].y, xv[0].z, xv[0].w, xv[1].x, xv[1].y, xv[1].z, xv[1].w,
                                   xv[2].x, xv[2].y, xv[2].z, xv[2].w, xv[3].x, xv[3].y, xv[3].z, xv[3].w};
#pragma unroll
          for (int j = 0; j < 8; ++j) tc::mma_m16n8k16(acc[t], a[j], xb[2 * j], xb[2 * j + 1]);
        }
      }
      if (step + 1 < steps) cur = nxt;
    }
    // acc[t]: features grp (0, 1) and grp + 8 (2, 3), tokens 8t + 2tig (0, 2) and + 1 (1, 3).
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int token = 8 * t + 2 * tig + c % 2;
        if (token < tokens) {
          p.y[(int64_t{pass} + token) * p.n + feature0 + grp + 8 * (c / 2)] = acc[t][c] * g;
        }
      }
    }
  }
}

}  // namespace

cudaError_t launch_expert_gemm(const ExpertGemmParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.n / kExpertGemmRows), static_cast<unsigned>(p.experts));
  if (p.k % kExpertGemmStepK == 0) {
    expert_gemm_kernel<false><<<grid, kExpertGemmThreads, 0, stream>>>(p);
  } else {
    expert_gemm_kernel<true><<<grid, kExpertGemmThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
