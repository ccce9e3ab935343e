// A backend that runs every op on another and times it: per op, the calls and the time between
// a mark before it and a mark after it on the inner backend's order of work (events on a GPU).
// For finding what a step spends its time on (`fp4serve generate --profile-ops`). Recording is
// off while profiling (every op must be timed as it runs), so decode steps run op by op.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace fp4 {

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(std::unique_ptr<Backend> inner);

  struct OpTime {
    std::string op;
    int64_t calls = 0;
    double ms = 0;
  };
  // Every op timed so far, longest total first; waits for the inner backend's work.
  std::vector<OpTime> totals() const;
  void reset() { marks_.clear(); }

  std::string_view name() const override { return inner_->name(); }
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void release(void* p) noexcept override { inner_->release(p); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override { inner_->fill_zero(dst, bytes); }
  bool uses_host_memory() const override { return inner_->uses_host_memory(); }
  MemoryStats device_memory() const override { return inner_->device_memory(); }
  int64_t op_scratch_bytes() const override { return inner_->op_scratch_bytes(); }
  std::unique_ptr<TimeMark> mark_time() override { return inner_->mark_time(); }

  void linear(const LinearParams& p) override;
  void linears(std::span<const LinearParams> parts) override;
  void rms_norm(const RmsNormParams& p) override;
  void add_rms_norm(const AddRmsNormParams& p) override;
  void gather_rows(const GatherRowsParams& p) override;
  void rope(const RopeParams& p) override;
  void gated_activation(const GatedActivationParams& p) override;
  void cache_insert(const CacheInsertParams& p) override;
  void pre_attention(const PreAttentionParams& p) override;
  void indexer_topk(const IndexerTopkParams& p) override;
  void paged_attention(const PagedAttentionParams& p) override;
  void router(const RouterParams& p) override;
  void moe_dispatch(const MoeDispatchParams& p) override;
  void moe_gather(const MoeGatherParams& p) override;
  void expert_gemm(const ExpertGemmParams& p) override;
  void moe_combine(const MoeCombineParams& p) override;
  bool samples_on_device() const override { return inner_->samples_on_device(); }
  void sample(const SampleParams& p) override;

 private:
  // Runs fn on the inner backend between two marks kept under `op`.
  template <typename Fn>
  void timed(const char* op, Fn&& fn);

  struct Timed {
    const char* op;
    std::unique_ptr<TimeMark> before, after;
  };
  std::unique_ptr<Backend> inner_;
  std::vector<Timed> marks_;
};

}  // namespace fp4
