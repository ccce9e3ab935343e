#include "backend/cuda/expert_gemm.h"

#include "backend/cuda/cuda_check.h"

namespace fp4::cuda {

void expert_gemm(const ExpertGemmParams& p, cudaStream_t stream) {
  FP4_CHECK(p.experts > 0 && p.experts < 65536, "expert_gemm: {} experts (1 to 65535)", p.experts);
  FP4_CHECK(p.n > 0 && p.n % detail::kExpertGemmRows == 0, "expert_gemm: n = {} is not a positive multiple of {}",
            p.n, detail::kExpertGemmRows);
  FP4_CHECK(p.k > 0 && p.k % 128 == 0, "expert_gemm: k = {} is not a positive multiple of 128", p.k);
  FP4_CHECK(p.rows >= 0, "expert_gemm: {} rows", p.rows);
  FP4_CHECK(p.row_offsets && p.values && p.scales && p.global_scales,
            "expert_gemm: row offsets, weights and global scales are required");
  if (p.rows == 0) return;
  FP4_CHECK(p.x && p.y, "expert_gemm: x and y are required");
  FP4_CHECK(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.values) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(p.scales) % 2 == 0,
            "expert_gemm: x and the codes must be 16-byte aligned, the scales 2-byte aligned");
  FP4_CUDA_CHECK(detail::launch_expert_gemm(p, stream));
}

}  // namespace fp4::cuda
