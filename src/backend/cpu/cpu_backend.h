// The CPU backend: every model op, multi-threaded with parallel_for, FP32 throughout. It is the
// oracle the CUDA kernels are tested against and the engine's fallback on a machine without a
// GPU, so each op is written to be obviously correct first and fast second.
#pragma once

#include "backend/backend.h"

namespace fp4::cpu {

// The ops as free functions, so tests can call the reference without a Backend object.
void linear(const LinearParams& p);
void rms_norm(const RmsNormParams& p);
void add_rms_norm(const AddRmsNormParams& p);
void gather_rows(const GatherRowsParams& p);
void rope(const RopeParams& p);
void gated_activation(const GatedActivationParams& p);
void router(const RouterParams& p);
void cache_insert(const CacheInsertParams& p);
void pre_attention(const PreAttentionParams& p);
void expert_gemm(const ExpertGemmParams& p);
// expert_gemm with every product replaced by its magnitude: y = g * sum |x w|, the scale of the
// sum's rounding error (what the GPU kernel's test and benchmark bound it by).
void expert_gemm_magnitude(const ExpertGemmParams& p);
void moe_dispatch(const MoeDispatchParams& p);
void moe_gather(const MoeGatherParams& p);
void moe_combine(const MoeCombineParams& p);
void indexer_topk(const IndexerTopkParams& p);
void paged_attention(const PagedAttentionParams& p);

class CpuBackend : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  void* allocate(size_t bytes) override;
  void release(void* p) noexcept override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  bool uses_host_memory() const override { return true; }

  void linear(const LinearParams& p) override { cpu::linear(p); }
  void rms_norm(const RmsNormParams& p) override { cpu::rms_norm(p); }
  void add_rms_norm(const AddRmsNormParams& p) override { cpu::add_rms_norm(p); }
  void gather_rows(const GatherRowsParams& p) override { cpu::gather_rows(p); }
  void rope(const RopeParams& p) override { cpu::rope(p); }
  void gated_activation(const GatedActivationParams& p) override { cpu::gated_activation(p); }
  void cache_insert(const CacheInsertParams& p) override { cpu::cache_insert(p); }
  void pre_attention(const PreAttentionParams& p) override { cpu::pre_attention(p); }
  void indexer_topk(const IndexerTopkParams& p) override { cpu::indexer_topk(p); }
  void paged_attention(const PagedAttentionParams& p) override { cpu::paged_attention(p); }
  void router(const RouterParams& p) override { cpu::router(p); }
  void moe_dispatch(const MoeDispatchParams& p) override { cpu::moe_dispatch(p); }
  void moe_gather(const MoeGatherParams& p) override { cpu::moe_gather(p); }
  void expert_gemm(const ExpertGemmParams& p) override { cpu::expert_gemm(p); }
  void moe_combine(const MoeCombineParams& p) override { cpu::moe_combine(p); }
};

}  // namespace fp4::cpu
