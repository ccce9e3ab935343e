// The routed experts' NVFP4 matmul on the GPU (W4A16): fp4::cpu::expert_gemm's contract
// (backend/model_ops.h ExpertGemmParams). The weights are dequantized in registers on their way
// to BF16 tensor-core MMAs; nothing dequantized is written to memory. Design and numerics:
// docs/kernels/expert_gemm.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/model_ops.h"

namespace fp4::cuda {

// Pointers in `p` are device pointers. Asynchronous on `stream`. Requirements, each checked
// with an fp4::Error naming it: n a multiple of 64, k a multiple of 128, x and the codes
// 16-byte aligned, the scales 2-byte aligned.
// The row offsets live on the device, so the host cannot check them; the grid depends on the
// shapes only (experts, n), so a launch can be captured in a CUDA graph.
void expert_gemm(const ExpertGemmParams& p, cudaStream_t stream);

namespace detail {

constexpr int kExpertGemmThreads = 128;  // 4 warps of 16 output features each
constexpr int kExpertGemmRows = 64;      // output features per CTA
constexpr int kExpertGemmStepK = 256;    // k values per main-loop step

cudaError_t launch_expert_gemm(const ExpertGemmParams& p, cudaStream_t stream);

}  // namespace detail
}  // namespace fp4::cuda
