#include "backend/backend.h"

#include "core/check.h"

namespace fp4 {

std::string_view model_op_name(ModelOp op) {
  switch (op) {
    case ModelOp::kLinear: return "linear";
    case ModelOp::kRmsNorm: return "rms_norm";
    case ModelOp::kAddRmsNorm: return "add_rms_norm";
    case ModelOp::kGatherRows: return "gather_rows";
    case ModelOp::kRope: return "rope";
    case ModelOp::kGatedActivation: return "gated_activation";
    case ModelOp::kCacheInsert: return "cache_insert";
    case ModelOp::kPreAttention: return "pre_attention";
    case ModelOp::kIndexerTopk: return "indexer_topk";
    case ModelOp::kPagedAttention: return "paged_attention";
    case ModelOp::kRouter: return "router";
    case ModelOp::kMoeDispatch: return "moe_dispatch";
    case ModelOp::kMoeGather: return "moe_gather";
    case ModelOp::kExpertGemm: return "expert_gemm";
    case ModelOp::kMoeCombine: return "moe_combine";
  }
  return "?";
}

void Backend::begin_capture() { fail("the {} backend cannot record ops", name()); }

std::unique_ptr<CapturedOps> Backend::end_capture() { fail("the {} backend cannot record ops", name()); }

void Backend::sample(const SampleParams&) { fail("the {} backend does not sample; the host sampler does", name()); }

}  // namespace fp4
