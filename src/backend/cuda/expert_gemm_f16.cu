// Routed experts' grouped matmul on FP16 tensor cores: NVFP4 weights expanded to FP16 (two
// shifts and a byte permute per pair, the attention kernels' placement) and activations scaled
// per row by a power of two into FP16. Design and numerics: docs/kernels/expert_gemm.md.
//
// Two launches. scale_rows_kernel: each row of x times 2^s_r, s_r putting the row's largest
// magnitude in [2^14, 2^15), as FP16, every group of 8 values stored in the MMA's k order
// (0, 2, 1, 3, 4, 6, 5, 7), so that a lane's B fragments are whole 16-byte loads, and the groups
// of a 128-value block interleaved by lane, so that those loads are coalesced.
// expert_gemm_f16_kernel: grid (n / 64, at most min(experts, rows) experts with rows), launched
// as a programmatic dependent of the first, 4 warps of 16 output features, as the BF16 kernel
// (expert_gemm.cu), but each warp streams its weights through a ring of shared-memory slots
// filled by cp.async, several steps ahead, instead of one step held in registers.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/expert_gemm.h"
#include "backend/cuda/expert_rows.cuh"
#include "backend/cuda/mma.cuh"

namespace fp4::cuda::detail {
namespace {

constexpr int kWarps = kExpertGemmThreads / 32;
constexpr int kStages = 4;  // ring slots per warp: 3 steps (6 KB of codes a warp) in flight
constexpr int kTiles = 4;   // 8-token MMA tiles per pass
constexpr int kBlocksPerStep = kExpertGemmStepK / 128;
constexpr int kScaleThreads = 128;
// 5 CTAs of 36 KB of shared memory each fit an SM; asking for them caps the registers at 102
// (157 unasked, 3 CTAs), without spills.
constexpr int kMinCtasPerSm = 5;

// One step of one warp: the codes of its 16 features, 8 16-byte chunks a feature (chunk 4b + t:
// block b, the 32 values lane tig = t reads), chunks XOR-swizzled by 4 on odd features so that
// the two features of a quarter-warp's 16-byte reads fall in different banks; then their block
// scales. Each copy instruction of a two-block step covers 4 whole 128-byte lines; a lane reads
// what other lanes copied, hence a __syncwarp between landing and reading.
struct Slot {
  uint4 codes[16][8];
  uint8_t scales[16][8 * kBlocksPerStep];
};
static_assert(kBlocksPerStep == 2, "a step is one 128-byte line of codes per feature");

__device__ __forceinline__ int swizzled_chunk(int feature, int chunk) { return chunk ^ ((feature & 1) << 2); }

__device__ __forceinline__ uint32_t max_abs_bf16x2(uint32_t m, uint32_t pair) {
  return max(m, max(pair & 0x7FFFu, (pair >> 16) & 0x7FFFu));
}

__device__ __forceinline__ uint32_t f16x2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float bf16_lo(uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t pair) { return __uint_as_float(pair & 0xFFFF0000u); }

// Programmatic dependent launch (dependent_launch.cuh): scale_rows_kernel lets the matmul launch
// as soon as every one of its CTAs has started, and the matmul finds its expert and fills its
// weights ring before it waits for the activations.

__global__ void __launch_bounds__(kScaleThreads) scale_rows_kernel(const uint16_t* x, int64_t k, uint4* x16,
                                                                   float* out_scale) {
  allow_dependent_launch();
  const int64_t row = blockIdx.x;
  const uint4* src = reinterpret_cast<const uint4*>(x + row * k);
  const int chunks = static_cast<int>(k / 8);
  // A row of up to kCached x 128 uint4 (k <= 8192: every M3 shape) is loaded once, all of a
  // thread's loads before any is used; longer rows are read again from L1 / L2 for the scaling.
  constexpr int kCached = 8;
  uint4 cached[kCached];
  // Magnitudes compare as integers: BF16 bits without the sign are ordered like the values, and
  // infinities and NaNs sit above every finite value.
  uint32_t m = 0;
  auto take = [&m](const uint4& v) {
    m = max_abs_bf16x2(max_abs_bf16x2(m, v.x), v.y);
    m = max_abs_bf16x2(max_abs_bf16x2(m, v.z), v.w);
  };
#pragma unroll
  for (int i = 0; i < kCached; ++i) {
    const int c = threadIdx.x + i * kScaleThreads;
    cached[i] = c < chunks ? src[c] : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < kCached; ++i) take(cached[i]);
  for (int c = threadIdx.x + kCached * kScaleThreads; c < chunks; c += kScaleThreads) take(src[c]);
  for (int o = 16; o > 0; o /= 2) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  __shared__ uint32_t warp_max[kScaleThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  m = warp_max[0];
  for (int w = 1; w < kScaleThreads / 32; ++w) m = max(m, warp_max[w]);
  // s = 14 - floor(log2 max): the largest value lands in [2^14, 2^15), below FP16's 65504, and
  // every value of at least 2^-17 times 2^s keeps all 8 of its BF16 bits. A row of zeros, or one
  // holding an infinity or NaN, keeps s = 0 (what is not finite stays so). s is capped at 127 so
  // that 2^s is a float; only rows whose largest value is below 2^-113 are affected.
  int s = 0;
  if (m != 0 && m < 0x7F80u) s = min(14 - ilogbf(__uint_as_float(m << 16)), 127);
  const float up = __int_as_float((s + 127) << 23);
  if (threadIdx.x == 0) out_scale[row] = __int_as_float((14 - s + 127) << 23);  // 2^(14 - s)
  auto store = [&](int c, const uint4& v) {  // v: (x0, x1), (x2, x3), (x4, x5), (x6, x7)
    // Within a 128-value block, lane tig's v-th group (values 32 tig + 8v ..) goes to 4v + tig,
    // so that one 16-byte load of the four lanes of a token reads 64 contiguous bytes.
    const int in_block = c % 16, lane_tig = in_block / 4, group = in_block % 4;
    x16[row * chunks + (c - in_block) + 4 * group + lane_tig] =
        make_uint4(f16x2(bf16_lo(v.x) * up, bf16_lo(v.y) * up),   // x0, x2
                   f16x2(bf16_hi(v.x) * up, bf16_hi(v.y) * up),   // x1, x3
                   f16x2(bf16_lo(v.z) * up, bf16_lo(v.w) * up),   // x4, x6
                   f16x2(bf16_hi(v.z) * up, bf16_hi(v.w) * up));  // x5, x7
  };
#pragma unroll
  for (int i = 0; i < kCached; ++i) {
    const int c = threadIdx.x + i * kScaleThreads;
    if (c < chunks) store(c, cached[i]);
  }
  for (int c = threadIdx.x + kCached * kScaleThreads; c < chunks; c += kScaleThreads) store(c, src[c]);
}

// The first 8 tokens' activations of a step, for kSharedX: token t's 32 uint4 (its 2 blocks, each
// in x16's lane-interleaved order), XOR-swizzled by 4 on odd tokens so that a quarter-warp's
// two tokens fall in different banks.
struct XSlot {
  uint4 x[8][2 * 16];
};

__device__ __forceinline__ int swizzled_x(int token, int index) { return index ^ ((token & 1) << 2); }

// Ring depth per variant: kSharedX gives up a slot for its activation ring, to stay at 5 CTAs
// an SM within 48 KB of static shared memory.
__host__ __device__ constexpr int stages_of(ExpertGemmF16Variant v) {
  return v == ExpertGemmF16Variant::kSharedX ? 3 : kStages;
}
__host__ __device__ constexpr int smem_bytes_of(ExpertGemmF16Variant v) {
  return kWarps * stages_of(v) * int{sizeof(Slot)} +
         (v == ExpertGemmF16Variant::kSharedX ? stages_of(v) * int{sizeof(XSlot)} : 0);
}

// kHalfTail: k = 128 (mod 256), so the last step has one block (kept out of the common kernel,
// as in expert_gemm.cu). kVariant: how the warps of a CTA get their activations (expert_gemm.h).
template <bool kHalfTail, ExpertGemmF16Variant kVariant>
__global__ void __launch_bounds__(kExpertGemmThreads, kMinCtasPerSm) expert_gemm_f16_kernel(const ExpertGemmParams p,
                                                                              const uint4* x16,
                                                                              const float* out_scale) {
  constexpr int S = stages_of(kVariant);
  constexpr bool kShared = kVariant == ExpertGemmF16Variant::kSharedX;
  __shared__ __align__(16) uint8_t smem[smem_bytes_of(kVariant)];
  Slot (*const ring)[S] = reinterpret_cast<Slot (*)[S]>(smem);
  XSlot* const xring = reinterpret_cast<XSlot*>(smem + kWarps * S * sizeof(Slot));
  // Before the wait: the offsets and the weights are the inputs of the whole layer, which
  // scale_rows_kernel does not write; x16 and out_scale are its outputs.
  const ExpertRows mine = find_expert(p.row_offsets, p.experts, p.rows, static_cast<int>(blockIdx.y));
  const int e = mine.expert, first = mine.first, last = mine.last;
  if (e < 0) return;
  if constexpr (kShared) wait_for_prerequisite_grid();  // its ring copies activations from the first step on
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, grp = lane / 4, tig = lane % 4;
  const int64_t feature0 = int64_t{blockIdx.x} * kExpertGemmRows + warp * 16;
  // Lane l copies chunk l % 8 of features l / 8 + 4i, i = 0 .. 3.
  const int copy_feature = lane / 8, copy_chunk = lane % 8;
  const uint8_t* const codes = p.values + (int64_t{e} * p.n + feature0 + copy_feature) * (p.k / 2) + 16 * copy_chunk;
  const int64_t four_features = 4 * (p.k / 2);
  // Lane l copies the scales of feature l / 2 for block (l % 2) of each step: 8 bytes.
  const uint8_t* scale_src = p.scales + (int64_t{e} * p.n + feature0 + lane / 2) * (p.k / 16) + 8 * (lane % 2);
  Slot* const slots = ring[warp];
  const float g = p.global_scales[e];
  const int blocks = static_cast<int>(p.k / 128);
  const int steps = (blocks + kBlocksPerStep - 1) / kBlocksPerStep;
  const int64_t chunks = p.k / 8;  // uint4s of an x16 row
  // The warp ring's CTAs walk k from different steps (CTA x from step x mod steps, wrapping
  // round), so that the requests in flight at any moment are not all the same 128 bytes of
  // thousands of rows 3 KB apart: 5-16% faster at 16-256 tokens timed a call alone, 4-5% at 16
  // in a graph (bench/RESULTS.md). kSharedX keeps the plain order: rotated, it measured 3%
  // slower and spilled.
  const int rotate = kShared ? 0 : static_cast<int>(blockIdx.x % static_cast<unsigned>(steps));
  auto along_k = [&](int step) {  // the step's place along k
    const int at = step + rotate;
    return at >= steps ? at - steps : at;
  };

  // Always one commit group per call, empty past the last step, so that "wait until S - 2 are
  // pending" always means "this step has landed".
  auto issue = [&](int step, int pass, int tokens) {
    if (step < steps) {
      const int at = along_k(step);
      if constexpr (kShared) {
        // Thread i copies uint4 i and i + 128 of the 8 tokens x 32 (zeros past the last token).
        XSlot& xs = xring[step % S];
#pragma unroll
        for (int j = threadIdx.x; j < 8 * 32; j += kExpertGemmThreads) {
          const int token = j / 32, index = j % 32;
          const bool real = token < tokens && (!kHalfTail || at * kBlocksPerStep + index / 16 < blocks);
          const uint4* src = x16 + (int64_t{pass} + (real ? token : 0)) * chunks + at * 32 + (real ? index : 0);
          tc::cp_async16(&xs.x[token][swizzled_x(token, index)], src, real);
        }
      }
      Slot& s = slots[step % S];
      if (!kHalfTail || at * kBlocksPerStep + copy_chunk / 4 < blocks) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int feature = copy_feature + 4 * i;
          tc::cp_async16(&s.codes[feature][swizzled_chunk(feature, copy_chunk)],
                         codes + i * four_features + 128 * int64_t{at}, true);
        }
      }
      if (!kHalfTail || at * kBlocksPerStep + lane % 2 < blocks) {
        tc::cp_async8(&s.scales[lane / 2][8 * (lane % 2)], scale_src + 8 * kBlocksPerStep * at);
      }
    }
    tc::cp_async_commit();
  };

  for (int pass = first; pass < last; pass += 8 * kTiles) {
    const int tokens = min(8 * kTiles, last - pass);
    // The previous pass's slots are read by every lane (every thread, with kSharedX) before any
    // refills them.
    if constexpr (kShared) __syncthreads(); else __syncwarp();
    float acc[kTiles][4] = {};
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue(s, pass, tokens);
    if (!kShared && pass == first) wait_for_prerequisite_grid();
    for (int step = 0; step < steps; ++step) {
      tc::cp_async_wait<S - 2>();
      // Every lane's copies of this step have landed, and the slot refilled next is free; with
      // kSharedX for the whole CTA, whose warps all copy the activations.
      if constexpr (kShared) __syncthreads(); else __syncwarp();
      issue(step + S - 1, pass, tokens);
      const Slot& s = slots[step % S];
#pragma unroll
      for (int b = 0; b < kBlocksPerStep; ++b) {
        const int at = along_k(step);
        if (kHalfTail && at * kBlocksPerStep + b >= blocks) break;  // uniform across the CTA
        // This lane's v-th 16 bytes of the block are uint4 4v + tig of it (see scale_rows_kernel).
        const int64_t k0 = (int64_t{at} * kExpertGemmStepK + 128 * b) / 8 + tig;
        // The first tile's activations are loaded before the expansion, which hides their latency.
        uint4 xv[4] = {};
        if constexpr (kShared) {
          const XSlot& xs = xring[step % S];
#pragma unroll
          for (int v = 0; v < 4; ++v) xv[v] = xs.x[grp][swizzled_x(grp, 16 * b + 4 * v + tig)];
        } else if (grp < tokens) {
          const uint4* src = x16 + (int64_t{pass} + grp) * chunks + k0;
#pragma unroll
          for (int v = 0; v < 4; ++v) xv[v] = __ldg(src + 4 * v);
        }
        uint32_t a[8][4];
#pragma unroll
        for (int f = 0; f < 2; ++f) {
          const int feature = grp + 8 * f;
          const uint4 c = s.codes[feature][swizzled_chunk(feature, 4 * b + tig)];
          const uint32_t two = *reinterpret_cast<const uint16_t*>(&s.scales[feature][8 * b + 2 * tig]);
          const uint32_t sf = tc::e4m3x2_to_f16x2(two);  // the scales of values 0-15 and 16-31
          const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {  // word i: stored values 8i .. 8i + 7 of the lane's 32
            uint32_t pairs[4];            // (v0, v2), (v4, v6), (v1, v3), (v5, v7), times 2^-14
            tc::e2m1x8_to_f16x2_permuted(w[i], pairs);
#pragma unroll
            for (int q = 0; q < 4; ++q) {  // exact
              pairs[q] = i < 2 ? tc::mul_f16x2_by_half<0>(pairs[q], sf) : tc::mul_f16x2_by_half<1>(pairs[q], sf);
            }
            // k-step 2i: slots (2tig, 2tig + 1) hold values 0, 2 and (2tig + 8, + 9) 1, 3;
            // k-step 2i + 1 the same with 4 .. 7. x16 is stored in that order.
            a[2 * i][f] = pairs[0];
            a[2 * i][2 + f] = pairs[2];
            a[2 * i + 1][f] = pairs[1];
            a[2 * i + 1][2 + f] = pairs[3];
          }
        }
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          if (8 * t >= tokens) break;  // uniform across the CTA
          if (t > 0) {
            const int token = 8 * t + grp;
#pragma unroll
            for (int v = 0; v < 4; ++v) xv[v] = make_uint4(0, 0, 0, 0);
            if (token < tokens) {
              const uint4* src = x16 + (int64_t{pass} + token) * chunks + k0;
#pragma unroll
              for (int v = 0; v < 4; ++v) xv[v] = __ldg(src + 4 * v);
            }
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            tc::mma_m16n8k16_f16(acc[t], a[2 * i], xv[i].x, xv[i].y);
            tc::mma_m16n8k16_f16(acc[t], a[2 * i + 1], xv[i].z, xv[i].w);
          }
        }
      }
    }
    tc::cp_async_wait<0>();
    // acc[t]: features grp (0, 1) and grp + 8 (2, 3), tokens 8t + 2tig (0, 2) and + 1 (1, 3);
    // the sums are of (w 2^-14)(x 2^s), so they are scaled back by 2^(14 - s) of their token,
    // after g: that product rounds once, as the BF16 kernel's does, and the power of two is exact
    // unless the output leaves FP32's normal range.
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int token = 8 * t + 2 * tig + c % 2;
        if (token < tokens) {
          const int64_t row = int64_t{pass} + token;
          p.y[row * p.n + feature0 + grp + 8 * (c / 2)] = acc[t][c] * g * out_scale[row];
        }
      }
    }
  }
}

// The matmul as a programmatic dependent of scale_rows_kernel: its launch, its search for its
// expert and its first weight copies overlap the scaling (the attribute is kept by stream
// capture, so a CUDA graph replays the same overlap).
template <ExpertGemmF16Variant kVariant>
cudaError_t launch_main(const ExpertGemmParams& p, dim3 grid, const uint4* x16, const float* out_scale,
                        cudaStream_t stream) {
  const dim3 block(kExpertGemmThreads);
  if (p.k % kExpertGemmStepK == 0) {
    return launch_dependent(expert_gemm_f16_kernel<false, kVariant>, grid, block, 0, stream, p, x16, out_scale);
  }
  return launch_dependent(expert_gemm_f16_kernel<true, kVariant>, grid, block, 0, stream, p, x16, out_scale);
}

}  // namespace

cudaError_t launch_expert_gemm_f16(const ExpertGemmParams& p, void* workspace, cudaStream_t stream,
                                   ExpertGemmF16Variant variant) {
  uint4* x16 = static_cast<uint4*>(workspace);
  float* out_scale = reinterpret_cast<float*>(x16 + p.rows * (p.k / 8));
  scale_rows_kernel<<<static_cast<unsigned>(p.rows), kScaleThreads, 0, stream>>>(p.x, p.k, x16, out_scale);
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  // At most this many experts have rows: a shape-only grid, as a CUDA graph needs. CTA y takes
  // the y-th of them (find_expert) and leaves at once when there are fewer.
  const dim3 grid(static_cast<unsigned>(p.n / kExpertGemmRows),
                  static_cast<unsigned>(expert_gemm_expert_slots(p)));
  if (variant == ExpertGemmF16Variant::kSharedX) {
    return launch_main<ExpertGemmF16Variant::kSharedX>(p, grid, x16, out_scale, stream);
  }
  return launch_main<ExpertGemmF16Variant::kWarpRing>(p, grid, x16, out_scale, stream);
}

}  // namespace fp4::cuda::detail
