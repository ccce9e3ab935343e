#include "backend/cuda/moe_math.h"

#include "backend/cuda/cuda_check.h"

namespace fp4::cuda {

void router(const RouterParams& p, cudaStream_t stream) {
  FP4_CHECK(p.experts > 0 && p.experts <= 1024, "router: {} experts (1 to 1,024)", p.experts);
  FP4_CHECK(p.top_k > 0 && p.top_k <= p.experts && p.top_k <= 32, "router: top_k {} must be in [1, min({}, 32)]",
            p.top_k, p.experts);
  FP4_CHECK(p.tokens >= 0 && p.tokens < (int64_t{1} << 31), "router: {} tokens", p.tokens);
  if (p.tokens == 0) return;
  FP4_CHECK(p.logits && p.expert_ids && p.weights, "router: logits, expert_ids and weights are required");
  FP4_CUDA_CHECK(detail::launch_router(p, stream));
}

void gated_activation(const GatedActivationParams& p, cudaStream_t stream) {
  FP4_CHECK(p.m >= 0 && p.m < (int64_t{1} << 31) && p.inter > 0 && p.inter <= 65535 * 256 && p.stride >= p.inter,
            "gated_activation: {} rows of {} (stride {})", p.m, p.inter, p.stride);
  if (p.m == 0) return;
  FP4_CHECK(p.gate && p.up && (p.out != nullptr) != (p.out_bf16 != nullptr),
            "gated_activation: gate, up and exactly one of out and out_bf16 are required");
  FP4_CUDA_CHECK(detail::launch_gated_activation(p, stream));
}

}  // namespace fp4::cuda
