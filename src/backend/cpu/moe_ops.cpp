// MoE dispatch, gather and combine on the CPU: the references of the GPU kernels, and what the
// CPU forward pass runs around its experts.
#include <algorithm>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/minifloat.h"

namespace fp4::cpu {

void moe_dispatch(const MoeDispatchParams& p) {
  const int64_t pairs = p.tokens * p.top_k;
  FP4_CHECK(pairs < (int64_t{1} << 31), "moe_dispatch: {} pairs exceed int32 rows", pairs);
  std::vector<int32_t> count(static_cast<size_t>(p.experts), 0);
  for (int64_t i = 0; i < pairs; ++i) {
    FP4_CHECK(p.expert_ids[i] >= 0 && p.expert_ids[i] < p.experts, "moe_dispatch: pair {} has expert {} (of {})", i,
              p.expert_ids[i], p.experts);
    ++count[p.expert_ids[i]];
  }
  p.row_offsets[0] = 0;
  std::partial_sum(count.begin(), count.end(), p.row_offsets + 1);
  std::vector<int32_t> next(p.row_offsets, p.row_offsets + p.experts);
  for (int64_t i = 0; i < pairs; ++i) {  // ascending pairs: stable within each expert
    const int32_t row = next[p.expert_ids[i]]++;
    p.pair_of_row[row] = static_cast<int32_t>(i);
    p.row_of_pair[i] = row;
  }
}

void moe_gather(const MoeGatherParams& p) {
  parallel_for_cost(p.rows, 2 * p.hidden, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* src = p.x + (p.pair_of_row[r] / p.top_k) * p.hidden;
      for (int64_t j = 0; j < p.hidden; ++j) p.x_grouped[r * p.hidden + j] = bf16_encode(src[j]);
    }
  });
}

void moe_combine(const MoeCombineParams& p) {
  parallel_for_cost(p.tokens, 3 * p.top_k * p.hidden, [&](int64_t t0, int64_t t1) {
    std::vector<int32_t> slots(static_cast<size_t>(p.top_k));
    for (int64_t t = t0; t < t1; ++t) {
      std::iota(slots.begin(), slots.end(), 0);
      const int32_t* ids = p.expert_ids + t * p.top_k;
      std::sort(slots.begin(), slots.end(),
                [&](int32_t a, int32_t b) { return ids[a] != ids[b] ? ids[a] < ids[b] : a < b; });
      for (int64_t j = 0; j < p.hidden; ++j) {
        float routed = 0.0f;
        for (int32_t s : slots) {
          const int64_t row = p.row_of_pair[t * p.top_k + s];
          routed += p.weights[t * p.top_k + s] * p.y_grouped[row * p.hidden + j];
        }
        const float base = p.shared != nullptr ? p.shared[t * p.hidden + j] : 0.0f;
        p.out[t * p.hidden + j] = base + p.routed_scale * routed;
      }
    }
  });
}

}  // namespace fp4::cpu
