#include "backend/profiling_backend.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace fp4 {

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {
  FP4_CHECK(inner_ != nullptr, "ProfilingBackend needs a backend to run the ops");
}

template <typename Fn>
void ProfilingBackend::timed(const char* op, Fn&& fn) {
  std::unique_ptr<TimeMark> before = inner_->mark_time();
  fn();
  marks_.push_back({op, std::move(before), inner_->mark_time()});
}

std::vector<ProfilingBackend::OpTime> ProfilingBackend::totals() const {
  std::map<std::string_view, OpTime> by_op;
  for (const Timed& m : marks_) {
    OpTime& t = by_op[m.op];
    t.op = m.op;
    ++t.calls;
    t.ms += m.after->ms_since(*m.before);
  }
  std::vector<OpTime> out;
  for (auto& [name, t] : by_op) out.push_back(std::move(t));
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

void ProfilingBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  timed("copy to device", [&] { inner_->copy_from_host(dst, src, bytes); });
}
void ProfilingBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  timed("copy to host", [&] { inner_->copy_to_host(dst, src, bytes); });
}
void ProfilingBackend::linear(const LinearParams& p) { timed("linear", [&] { inner_->linear(p); }); }
void ProfilingBackend::linears(std::span<const LinearParams> parts) {
  timed("linears", [&] { inner_->linears(parts); });
}
void ProfilingBackend::rms_norm(const RmsNormParams& p) { timed("rms_norm", [&] { inner_->rms_norm(p); }); }
void ProfilingBackend::add_rms_norm(const AddRmsNormParams& p) {
  timed("add_rms_norm", [&] { inner_->add_rms_norm(p); });
}
void ProfilingBackend::gather_rows(const GatherRowsParams& p) {
  timed("gather_rows", [&] { inner_->gather_rows(p); });
}
void ProfilingBackend::rope(const RopeParams& p) { timed("rope", [&] { inner_->rope(p); }); }
void ProfilingBackend::gated_activation(const GatedActivationParams& p) {
  timed("gated_activation", [&] { inner_->gated_activation(p); });
}
void ProfilingBackend::cache_insert(const CacheInsertParams& p) {
  timed("cache_insert", [&] { inner_->cache_insert(p); });
}
void ProfilingBackend::pre_attention(const PreAttentionParams& p) {
  timed("pre_attention", [&] { inner_->pre_attention(p); });
}
void ProfilingBackend::indexer_topk(const IndexerTopkParams& p) {
  timed("indexer_topk", [&] { inner_->indexer_topk(p); });
}
void ProfilingBackend::paged_attention(const PagedAttentionParams& p) {
  timed("paged_attention", [&] { inner_->paged_attention(p); });
}
void ProfilingBackend::router(const RouterParams& p) { timed("router", [&] { inner_->router(p); }); }
void ProfilingBackend::moe_dispatch(const MoeDispatchParams& p) {
  timed("moe_dispatch", [&] { inner_->moe_dispatch(p); });
}
void ProfilingBackend::moe_gather(const MoeGatherParams& p) { timed("moe_gather", [&] { inner_->moe_gather(p); }); }
void ProfilingBackend::expert_gemm(const ExpertGemmParams& p) {
  timed("expert_gemm", [&] { inner_->expert_gemm(p); });
}
void ProfilingBackend::moe_combine(const MoeCombineParams& p) {
  timed("moe_combine", [&] { inner_->moe_combine(p); });
}
void ProfilingBackend::sample(const SampleParams& p) { timed("sample", [&] { inner_->sample(p); }); }

}  // namespace fp4
