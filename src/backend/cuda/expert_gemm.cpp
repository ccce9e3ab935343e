#include "backend/cuda/expert_gemm.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/stream_scratch.h"

namespace fp4::cuda {

int64_t expert_gemm_expert_slots(const ExpertGemmParams& p) { return std::min(p.experts, p.rows); }

size_t expert_gemm_f16_scratch_bytes(const ExpertGemmParams& p) {
  return static_cast<size_t>(p.rows) * static_cast<size_t>(p.k) * 2 + static_cast<size_t>(p.rows) * 4;
}

ExpertGemmKernel expert_gemm_kernel_for(const ExpertGemmParams& p, const ExpertGemmOptions& options) {
  if (options.kernel != ExpertGemmKernel::kAuto) return options.kernel;
  if (p.rows <= kExpertGemmSkinnyMaxRows && expert_gemm_skinny_smem_bytes(p.k) <= kExpertGemmSkinnyMaxSmem) {
    return ExpertGemmKernel::kSkinny;
  }
  const bool scales_aligned = reinterpret_cast<uintptr_t>(p.scales) % 8 == 0;  // its 8-byte copies
  return scales_aligned && expert_gemm_f16_scratch_bytes(p) <= kExpertGemmF16MaxScratch ? ExpertGemmKernel::kF16
                                                                                        : ExpertGemmKernel::kBf16;
}

ExpertGemmF16Variant expert_gemm_f16_variant_for(const ExpertGemmParams& p, const ExpertGemmOptions& options) {
  if (options.f16_variant != ExpertGemmF16Variant::kAuto) return options.f16_variant;
  return p.rows >= 16 * p.experts ? ExpertGemmF16Variant::kSharedX : ExpertGemmF16Variant::kWarpRing;
}

namespace {

// The shapes and the layer's inputs, checked before any scratch is sized or taken.
void check_shapes(const ExpertGemmParams& p) {
  FP4_CHECK(p.experts > 0 && p.experts < 65536, "expert_gemm: {} experts (1 to 65535)", p.experts);
  FP4_CHECK(p.n > 0 && p.n % detail::kExpertGemmRows == 0, "expert_gemm: n = {} is not a positive multiple of {}",
            p.n, detail::kExpertGemmRows);
  FP4_CHECK(p.k > 0 && p.k % 128 == 0, "expert_gemm: k = {} is not a positive multiple of 128", p.k);
  FP4_CHECK(p.rows >= 0 && p.rows < (int64_t{1} << 31), "expert_gemm: {} rows", p.rows);
  FP4_CHECK(p.row_offsets && p.values && p.scales && p.global_scales,
            "expert_gemm: row offsets, weights and global scales are required");
}

}  // namespace

size_t expert_gemm_workspace_bytes(const ExpertGemmParams& p, const ExpertGemmOptions& options) {
  check_shapes(p);
  if (p.rows == 0) return 0;
  return expert_gemm_kernel_for(p, options) == ExpertGemmKernel::kF16 ? expert_gemm_f16_scratch_bytes(p) : 0;
}

void expert_gemm(const ExpertGemmParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                 const ExpertGemmOptions& options) {
  check_shapes(p);
  if (p.rows == 0) return;
  FP4_CHECK(p.x && p.y, "expert_gemm: x and y are required");
  FP4_CHECK(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.values) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(p.scales) % 2 == 0,
            "expert_gemm: x and the codes must be 16-byte aligned, the scales 2-byte aligned");
  const ExpertGemmKernel kernel = expert_gemm_kernel_for(p, options);
  if (kernel == ExpertGemmKernel::kSkinny) {
    FP4_CHECK(expert_gemm_skinny_smem_bytes(p.k) <= kExpertGemmSkinnyMaxSmem,
              "expert_gemm: the skinny kernel takes k up to {}, not {}", kExpertGemmSkinnyMaxSmem / 4, p.k);
    FP4_CUDA_CHECK(detail::launch_expert_gemm_skinny(p, stream));
    return;
  }
  if (kernel == ExpertGemmKernel::kBf16) {
    FP4_CUDA_CHECK(detail::launch_expert_gemm(p, stream));
    return;
  }
  FP4_CHECK(reinterpret_cast<uintptr_t>(p.scales) % 8 == 0, "expert_gemm: the FP16 kernel needs 8-byte aligned scales");
  const size_t needed = expert_gemm_f16_scratch_bytes(p);
  FP4_CHECK(workspace != nullptr && workspace_bytes >= needed && reinterpret_cast<uintptr_t>(workspace) % 16 == 0,
            "expert_gemm: the FP16 kernel needs a 16-byte aligned workspace of {} bytes, got {} bytes at {}", needed,
            workspace_bytes, workspace);
  FP4_CUDA_CHECK(detail::launch_expert_gemm_f16(p, workspace, stream, expert_gemm_f16_variant_for(p, options)));
}

void expert_gemm(const ExpertGemmParams& p, cudaStream_t stream, const ExpertGemmOptions& options) {
  // The stream-ordered allocator keeps this capturable in a CUDA graph and reuses the pool's
  // memory from one layer to the next.
  with_stream_scratch(expert_gemm_workspace_bytes(p, options), stream, [&](void* workspace, size_t bytes) {
    expert_gemm(p, workspace, bytes, stream, options);
  });
}

}  // namespace fp4::cuda
