// What the two scoring kernels of the MSA indexer share (indexer_topk.cu: exact FP32 on CUDA
// cores; indexer_score_mma.cu: BF16 tensor cores): the shared-memory image of a page's
// index-K rows and its asynchronous staging, and the visible-block count.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/indexer_topk.h"
#include "kvcache/page_layout.h"

namespace fp4::cuda::detail {

// Shared-memory image of one page's key rows: codes [page_tokens][kCodeStride] (the stride
// chosen by each kernel for conflict-free reads), then the NVFP4 block scales
// [page_tokens][kScaleBytes].
template <kvcache::PageDType D, int kDim, int kStride>
struct PageRows {
  static constexpr int kCodeBytes = static_cast<int>(kvcache::page_code_bytes(D, kDim));
  static constexpr int kScaleBytes = D == kvcache::PageDType::kNVFP4 ? kDim / 16 : 0;
  static constexpr int kCodeStride = kStride;
  static_assert(kCodeStride >= kCodeBytes, "rows overlap");
  __host__ __device__ static constexpr int scales_at(int page_tokens) { return (page_tokens * kCodeStride + 15) / 16 * 16; }
  __host__ __device__ static constexpr int stage_bytes(int page_tokens) {
    return scales_at(page_tokens) + (page_tokens * kScaleBytes + 15) / 16 * 16;
  }
  // Two stages (the next page lands while this one is scored) unless that would not fit.
  static constexpr int kStages = 2 * stage_bytes(kMaxPageTokens) <= 150 * 1024 ? 2 : 1;
};

__device__ __forceinline__ void cp_async16(void* smem, const void* global) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory"); }

// Starts copying the rows of keys [0, keys) of a page into a stage, 16 coalesced bytes per
// thread and instruction.
template <typename R>
__device__ __forceinline__ void stage_page(const IndexerArgs& a, const uint8_t* page, int keys, uint8_t* stage) {
  const int code_units = (keys * R::kCodeBytes + 15) / 16;
  for (int u = threadIdx.x; u < code_units; u += kScoreThreads) {
    const int byte = 16 * u;
    const int dst = R::kCodeStride == R::kCodeBytes ? byte : byte / R::kCodeBytes * R::kCodeStride + byte % R::kCodeBytes;
    cp_async16(stage + dst, page + a.codes_offset + byte);
  }
  if constexpr (R::kScaleBytes > 0) {
    uint8_t* scales = stage + R::scales_at(a.page_tokens);
    const int scale_units = (keys * R::kScaleBytes + 15) / 16;
    for (int u = threadIdx.x; u < scale_units; u += kScoreThreads) cp_async16(scales + 16 * u, page + a.scales_offset + 16 * u);
  }
}

__device__ __forceinline__ int64_t visible_blocks(const IndexerArgs& a, int64_t t) {
  const int64_t blocks = a.positions[t] / a.page_tokens + 1;
  return blocks < a.max_blocks ? blocks : a.max_blocks;
}

}  // namespace fp4::cuda::detail
