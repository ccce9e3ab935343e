// The routed experts' NVFP4 matmul on the GPU (W4A16): fp4::cpu::expert_gemm's contract
// (backend/model_ops.h ExpertGemmParams). The weights are dequantized in registers on their way
// to FP16 or BF16 tensor-core MMAs; nothing dequantized is written to memory. Design and numerics:
// docs/kernels/expert_gemm.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/model_ops.h"

namespace fp4::cuda {

// Which kernel multiplies. kSkinny (what kAuto takes for up to kExpertGemmSkinnyMaxRows rows,
// one decode token's experts, where a row of x in FP32 fits kExpertGemmSkinnyMaxSmem): FP32 fused
// multiply-adds on the CUDA cores, the weights loaded straight into registers, one pass over an
// expert's weights per row. kF16 (what kAuto takes otherwise whenever its scratch, the
// activations in FP16, fits in kExpertGemmF16MaxScratch and the scales are 8-byte aligned): FP16
// MMAs over activations scaled per row by a power of two, the weights streamed through shared
// memory. kBf16: BF16 MMAs straight from x, no scratch (long prefill chunks). All compute the
// contract's exact products; docs/kernels/expert_gemm.md gives the numerics of each.
enum class ExpertGemmKernel { kAuto, kBf16, kF16, kSkinny };

// How the FP16 kernel's warps get their activations. kWarpRing: each warp loads them through
// L1 on its own schedule, its weights ring three steps ahead, the CTAs of an expert starting
// along k at different steps. kSharedX: the first 8 tokens' activations of each step are copied
// once per CTA into a shared ring beside the weights (two steps ahead, the CTA in step): a
// quarter of the activation traffic, for one step less in flight. kAuto: kSharedX from 16 rows
// an expert on average (rows >= 16 x experts: a prefill chunk), else kWarpRing. Measured
// (bench/RESULTS.md): with its CTAs' starting steps rotated, the warp ring is the faster at
// every decode batch of the bench, up to 256 tokens (8 rows an expert) by 5-6%; 16 rows an
// expert and more, where each warp's activation loads grow with the tokens, were not measured.
enum class ExpertGemmF16Variant { kAuto, kWarpRing, kSharedX };

struct ExpertGemmOptions {
  ExpertGemmKernel kernel = ExpertGemmKernel::kAuto;
  ExpertGemmF16Variant f16_variant = ExpertGemmF16Variant::kAuto;
};

// The FP16 kernel's scratch for these shapes: rows x k FP16 values and a float per row.
size_t expert_gemm_f16_scratch_bytes(const ExpertGemmParams& p);
// The FP16 and skinny kernels' grid slots for experts: at most this many experts have rows.
int64_t expert_gemm_expert_slots(const ExpertGemmParams& p);
constexpr size_t kExpertGemmF16MaxScratch = size_t{64} << 20;
constexpr int64_t kExpertGemmSkinnyMaxRows = 4;
// The skinny kernel holds a row of x in FP32 in shared memory: k <= 12,288.
constexpr size_t kExpertGemmSkinnyMaxSmem = size_t{48} << 10;
constexpr size_t expert_gemm_skinny_smem_bytes(int64_t k) { return static_cast<size_t>(k) * 4; }

// The kernel and the FP16 kernel's variant that kAuto runs for these shapes.
ExpertGemmKernel expert_gemm_kernel_for(const ExpertGemmParams& p, const ExpertGemmOptions& options = {});
ExpertGemmF16Variant expert_gemm_f16_variant_for(const ExpertGemmParams& p, const ExpertGemmOptions& options = {});

// Pointers in `p` are device pointers. Asynchronous on `stream`. Requirements, each checked
// with an fp4::Error naming it: n a multiple of 64, k a multiple of 128, x and the codes
// 16-byte aligned, the scales 2-byte aligned (8 for kF16).
// The row offsets live on the device, so the host cannot check them (the kernels clamp each
// expert's range to [0, rows], so corrupt ones cost outputs, not memory); the grids depend on the
// shapes only (rows, experts, n), so a launch can be captured in a CUDA graph (the FP16
// kernel's scratch comes from the stream-ordered allocator, which is capturable).
// The skinny kernel starts while the kernel before it in the stream ends (a programmatic
// dependent launch) and reads the row offsets before it waits for that kernel: their writer
// must have finished before the kernel just before the call started (in a layer: the dispatch,
// then the activations' gather, a plain launch), or they come from the host. x may come from
// the kernel just before, or from one before it that that kernel waited for (the up projection
// reads the gather's rows after the gate's, which waited for them).
void expert_gemm(const ExpertGemmParams& p, cudaStream_t stream, const ExpertGemmOptions& options = {});
// The same with the FP16 kernel's scratch supplied: expert_gemm_workspace_bytes(p, options) bytes,
// 16-byte aligned (0, and any pointer, where another kernel runs). The size is asked after the
// call's shape checks, so bad shapes fail there, with the call's message.
size_t expert_gemm_workspace_bytes(const ExpertGemmParams& p, const ExpertGemmOptions& options = {});
void expert_gemm(const ExpertGemmParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                 const ExpertGemmOptions& options = {});

namespace detail {

constexpr int kExpertGemmThreads = 128;  // 4 warps of 16 output features each
constexpr int kExpertGemmRows = 64;      // output features per CTA
constexpr int kExpertGemmStepK = 256;    // k values per main-loop step

cudaError_t launch_expert_gemm(const ExpertGemmParams& p, cudaStream_t stream);
cudaError_t launch_expert_gemm_skinny(const ExpertGemmParams& p, cudaStream_t stream);
// `workspace`: expert_gemm_f16_scratch_bytes(p) bytes, 16-byte aligned.
cudaError_t launch_expert_gemm_f16(const ExpertGemmParams& p, void* workspace, cudaStream_t stream,
                                   ExpertGemmF16Variant variant);

}  // namespace detail
}  // namespace fp4::cuda
