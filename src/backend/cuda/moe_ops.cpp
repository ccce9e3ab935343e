#include "backend/cuda/moe_ops.h"

#include "backend/cuda/cuda_check.h"

namespace fp4::cuda {

void moe_dispatch(const MoeDispatchParams& p, cudaStream_t stream) {
  FP4_CHECK(p.tokens >= 0 && p.top_k > 0 && p.experts > 0 && p.experts < 65536,
            "moe_dispatch: {} tokens, top-{} of {} experts", p.tokens, p.top_k, p.experts);
  FP4_CHECK(p.tokens * p.top_k < (int64_t{1} << 30), "moe_dispatch: {} pairs exceed 2^30", p.tokens * p.top_k);
  FP4_CHECK(p.row_offsets && (p.tokens == 0 || (p.expert_ids && p.pair_of_row && p.row_of_pair)),
            "moe_dispatch: ids, offsets and the two maps are required");
  FP4_CUDA_CHECK(detail::launch_moe_dispatch(p, stream));
}

void moe_gather(const MoeGatherParams& p, cudaStream_t stream) {
  FP4_CHECK(p.rows >= 0 && p.top_k > 0 && p.hidden > 0, "moe_gather: {} rows of {} (top-{})", p.rows, p.hidden,
            p.top_k);
  if (p.rows == 0) return;
  FP4_CHECK(p.x && p.pair_of_row && p.x_grouped, "moe_gather: x, pair_of_row and x_grouped are required");
  FP4_CHECK(p.rows < (int64_t{1} << 31), "moe_gather: {} rows exceed one launch", p.rows);
  FP4_CUDA_CHECK(detail::launch_moe_gather(p, stream));
}

void moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  FP4_CHECK(p.tokens >= 0 && p.top_k > 0 && p.top_k <= detail::kMaxCombineSlots && p.hidden > 0,
            "moe_combine: {} tokens of {}, top-{} (at most {})", p.tokens, p.hidden, p.top_k,
            detail::kMaxCombineSlots);
  if (p.tokens == 0) return;
  FP4_CHECK(p.y_grouped && p.row_of_pair && p.expert_ids && p.weights && p.out,
            "moe_combine: y_grouped, row_of_pair, expert_ids, weights and out are required");
  FP4_CHECK(p.tokens < (int64_t{1} << 31), "moe_combine: {} tokens exceed one launch", p.tokens);
  FP4_CUDA_CHECK(detail::launch_moe_combine(p, stream));
}

}  // namespace fp4::cuda
