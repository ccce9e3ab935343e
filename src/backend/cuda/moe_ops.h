// MoE dispatch, gather and combine on the GPU: fp4::cpu::moe_dispatch / moe_gather /
// moe_combine's contracts (backend/model_ops.h), bit for bit. With expert_gemm they make the
// routed-expert half of an MoE layer: dispatch, gather to BF16, gate and up, activation, down,
// combine.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/model_ops.h"

namespace fp4::cuda {

// Pointers are device pointers; asynchronous on `stream`. The grids depend on shapes only.
// Expert ids live on the device: a pair whose id is out of range is placed in no row, its
// row_of_pair is -1, the rows past the valid pairs have pair_of_row -1 (gather makes them NaN)
// and combine turns that token's outputs into NaN (the CPU reference throws). Gather takes rows
// = tokens x top_k.
void moe_dispatch(const MoeDispatchParams& p, cudaStream_t stream);
void moe_gather(const MoeGatherParams& p, cudaStream_t stream);
// top_k at most detail::kMaxCombineSlots (16).
void moe_combine(const MoeCombineParams& p, cudaStream_t stream);

namespace detail {

// The combine keeps each of a token's slots in registers.
constexpr int kMaxCombineSlots = 16;

cudaError_t launch_moe_dispatch(const MoeDispatchParams& p, cudaStream_t stream);
cudaError_t launch_moe_gather(const MoeGatherParams& p, cudaStream_t stream);
cudaError_t launch_moe_combine(const MoeCombineParams& p, cudaStream_t stream);

}  // namespace detail
}  // namespace fp4::cuda
