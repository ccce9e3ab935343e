// CUDA paged attention (sm_90a): the GPU counterpart of fp4::cpu::paged_attention, same
// contract (backend/model_ops.h PagedAttentionParams), dense or MSA-sparse, on FP32, BF16, FP8
// and NVFP4 pages. NVFP4 and FP8 pages are dequantized on the fly, never copied out.
// Kernel design, bytes moved and numerics: docs/kernels/attention_decode.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/model_ops.h"

namespace fp4::cuda {

// Which kernel computes the attention. kAuto takes a tensor-core kernel for BF16, FP8 and
// NVFP4 pages (heads of 32 dims or more) and the CUDA-core kernel otherwise (FP32 keys are not
// exact in BF16): for dense attention, the prefill kernel when the step has on average 4 or
// more query tokens per sequence and enough of them to fill the GPU
// (docs/kernels/attention_prefill.md), else the decode one. The others are for tests and benchmarks (the tensor-core kernels refuse FP32
// pages; the prefill kernel, which has no split-K, also selections of more than 64 blocks and
// any split count but 1).
enum class AttentionKernelChoice : uint8_t { kAuto, kCudaCore, kTensorCore, kPrefill };

// Where kAuto takes the prefill kernel (for a step it fits, see above): dense attention only
// (the default), sparse attention too, or never.
enum class PrefillKernelUse : uint8_t { kDense, kAll, kNever };

struct PagedAttentionOptions {
  AttentionKernelChoice kernel = AttentionKernelChoice::kAuto;
  // Split-K factor: 0 derives it from the shapes and the device's SM count (enough CTAs to fill
  // the GPU, at most one split per block or selection slot); a positive value forces it (capped
  // the same way), for tests and benchmarks.
  int splits = 0;
  PrefillKernelUse prefill = PrefillKernelUse::kDense;
};

// Pointers in `p` are device pointers except `p.layout`, a host PageLayout whose numbers the
// launcher copies. Requirements, each checked with an fp4::Error naming it: K/V pages of 128
// tokens with one group per head (layout heads and head_dim equal to the params'), head_dim 32,
// 64 or 128, at most 16 query heads per KV head, a 16-byte aligned pool, q and out, and page
// sizes that are multiples of 16 bytes. Indices that live on the device (positions, sequences,
// block tables, selections) cannot be checked by the host: where the CPU reference would throw,
// the kernel writes NaN to that token's (KV head's) outputs instead of reading out of bounds.

// Bytes of scratch the launch below needs with these params and options (0 with one split):
// the splits' partial outputs and log2-sum-exps. Depends on shapes and the current device only.
size_t paged_attention_workspace_bytes(const PagedAttentionParams& p,
                                       const PagedAttentionOptions& options = {});

// The split count the launch below takes with these params and options (1 for an empty step):
// the split plan's choice, or options.splits as capped. Depends on shapes and the current device
// only, like the workspace.
int paged_attention_splits(const PagedAttentionParams& p, const PagedAttentionOptions& options = {});

// Asynchronous on `stream`; `workspace` (device memory, 256-byte aligned, at least
// paged_attention_workspace_bytes) is used until the launch completes on the stream.
void paged_attention(const PagedAttentionParams& p, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream, const PagedAttentionOptions& options = {});

// As above with a workspace taken from and returned to the stream-ordered allocator
// (cudaMallocAsync / cudaFreeAsync on `stream`), so it needs no synchronization.
void paged_attention(const PagedAttentionParams& p, cudaStream_t stream,
                     const PagedAttentionOptions& options = {});

}  // namespace fp4::cuda
