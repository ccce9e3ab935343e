// The rows of one expert, found on the device by the expert matmuls' CTAs (expert_gemm_f16.cu,
// expert_gemm_skinny.cu), whose grids have a slot per expert that can have rows, not one per
// expert: which experts have rows is device data, and the grid must depend on shapes only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp4::cuda::detail {

// The rows of the index-th expert that has rows, in expert order (expert -1 when fewer have
// them), found by one warp from the offsets alone, so that a CTA knows its weights before the
// kernel before it has finished. The offsets are device data the host cannot check: each
// range is clamped to [0, rows], so that corrupt ones cost outputs, never memory outside x and
// y. 128 experts' offsets are loaded before any is looked at (one memory latency, not four).
struct ExpertRows {
  int expert, first, last;
};
__device__ __forceinline__ ExpertRows find_expert(const int32_t* row_offsets, int64_t experts, int64_t rows,
                                                  int index) {
  constexpr int kRound = 4;
  const int lane = threadIdx.x % 32;
  ExpertRows found{-1, 0, 0};
  int seen = 0;
  for (int64_t base = 0; base < experts && found.expert < 0; base += 32 * kRound) {
    int first[kRound], last[kRound];
#pragma unroll
    for (int i = 0; i < kRound; ++i) {
      const int64_t e = base + 32 * i + lane;
      first[i] = 0, last[i] = 0;
      if (e < experts) {
        first[i] = max(row_offsets[e], 0);
        last[i] = min(row_offsets[e + 1], static_cast<int>(rows));
      }
    }
#pragma unroll
    for (int i = 0; i < kRound; ++i) {
      const bool has_rows = first[i] < last[i];
      const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, has_rows);
      const int target = index - seen;
      if (found.expert < 0 && target < __popc(ballot)) {  // warp-uniform
        const bool mine = has_rows && __popc(ballot & ((1u << lane) - 1)) == target;
        const int src = __ffs(__ballot_sync(0xFFFFFFFFu, mine)) - 1;
        found = {static_cast<int>(base + 32 * i + src), __shfl_sync(0xFFFFFFFFu, first[i], src),
                 __shfl_sync(0xFFFFFFFFu, last[i], src)};
      }
      seen += __popc(ballot);
    }
  }
  return found;
}

}  // namespace fp4::cuda::detail
