// Router and gated-activation kernels. -fmad=false keeps every product and sum rounded as the
// CPU's, so only expf differs (see moe_math.h).
#include <cuda_runtime.h>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/moe_math.h"
#include "formats/minifloat.h"

namespace fp4::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxPerLane = 1024 / 32;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// One warp per token. Each lane holds experts lane, lane + 32, ...; the top_k are taken one at a
// time by a warp arg-max over (choice, lower id first), the CPU's order.
__global__ void __launch_bounds__(kThreads) router_kernel(const RouterParams p) {
  const int64_t t = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;
  if (t >= p.tokens) return;  // whole warps
  const int lane = threadIdx.x % 32, experts = static_cast<int>(p.experts);
  float score[kMaxPerLane], choice[kMaxPerLane];
  uint32_t taken = 0;  // bit i: expert lane + 32 i chosen
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    score[i] = e < experts ? sigmoid(p.logits[t * experts + e]) : 0.0f;
    choice[i] = e < experts ? score[i] + (p.bias != nullptr ? p.bias[e] : 0.0f) : 0.0f;
  }
  float chosen_score[32];
  float sum = 0.0f;
  for (int k = 0; k < p.top_k; ++k) {
    float best = 0.0f, best_score = 0.0f;
    int best_id = -1;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e >= experts || (taken >> i & 1)) continue;
      if (best_id < 0 || choice[i] > best) {  // ascending e: ties keep the lower id
        best = choice[i];
        best_score = score[i];
        best_id = e;
      }
    }
    for (int d = 16; d > 0; d /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, best, d);
      const float other_score = __shfl_xor_sync(0xffffffffu, best_score, d);
      const int other_id = __shfl_xor_sync(0xffffffffu, best_id, d);
      const bool better = other_id >= 0 && (best_id < 0 || other > best || (other == best && other_id < best_id));
      if (better) {
        best = other;
        best_score = other_score;
        best_id = other_id;
      }
    }
    if (best_id % 32 == lane) taken |= 1u << (best_id / 32);
    if (lane == 0) p.expert_ids[t * p.top_k + k] = best_id;
    chosen_score[k] = best_score;
    sum += best_score;  // in selection order, as the CPU sums
  }
  if (lane == 0) {
    for (int k = 0; k < p.top_k; ++k) p.weights[t * p.top_k + k] = chosen_score[k] / sum;
  }
}

__global__ void __launch_bounds__(kThreads) gated_activation_kernel(const GatedActivationParams p) {
  allow_dependent_launch();  // the down projection that follows waits for the activations itself
  const int64_t r = blockIdx.x;
  const int64_t i = int64_t{blockIdx.y} * kThreads + threadIdx.x;
  if (i >= p.inter) return;
  const float g = p.gate[r * p.stride + i], u = p.up[r * p.stride + i];
  float o;
  if (p.kind == GatedActivation::kSilu) {
    o = g * sigmoid(g) * u;
  } else {
    const float gc = p.limit < g ? p.limit : g;  // std::min's and std::clamp's NaN behaviour
    const float uc = u < -p.limit ? -p.limit : p.limit < u ? p.limit : u;
    o = gc * sigmoid(p.alpha * gc) * (uc + p.beta);
  }
  if (p.out_bf16 != nullptr) p.out_bf16[r * p.inter + i] = bf16_encode(o);
  else p.out[r * p.inter + i] = o;
}

}  // namespace

cudaError_t launch_router(const RouterParams& p, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>((p.tokens + kWarps - 1) / kWarps);
  router_kernel<<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_gated_activation(const GatedActivationParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.m), static_cast<unsigned>((p.inter + kThreads - 1) / kThreads));
  gated_activation_kernel<<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
