// The router and the gated activation on the GPU: fp4::cpu::router's and
// fp4::cpu::gated_activation's contracts (backend/model_ops.h). Both evaluate the sigmoid as
// the CPU does, 1 / (1 + exp(-x)) with an IEEE division, but with CUDA's expf (at most 2 ulp
// from exp(x) where glibc's is within 1): scores and activations may differ from the CPU's by a
// few ulp, and a router's choice may differ at a near-tie. The tests bound both.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/model_ops.h"

namespace fp4::cuda {

// Pointers are device pointers; asynchronous on `stream`. Router: at most 1,024 experts and
// top_k at most 32; logits must be finite (a NaN would make the CPU's order undefined too).
void router(const RouterParams& p, cudaStream_t stream);
void gated_activation(const GatedActivationParams& p, cudaStream_t stream);

namespace detail {

cudaError_t launch_router(const RouterParams& p, cudaStream_t stream);
cudaError_t launch_gated_activation(const GatedActivationParams& p, cudaStream_t stream);

}  // namespace detail
}  // namespace fp4::cuda
