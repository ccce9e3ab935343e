// The interface every compute backend implements. The model is written once against it; the
// CPU backend is the reference and the fallback, and a backend that cannot run an op (or an op
// with a given cache format) says so through supports(), so the engine can refuse or fall back
// and tests can skip honestly instead of failing obscurely.
#pragma once

#include <string_view>

#include "backend/model_ops.h"

namespace fp4 {

enum class ModelOp : uint8_t {
  kLinear,
  kRmsNorm,
  kRope,
  kGatedActivation,
  kCacheInsert,
  kPreAttention,
  kIndexerTopk,
  kPagedAttention,
  kRouter,
  kMoeDispatch,
  kMoeCombine,
};

std::string_view model_op_name(ModelOp op);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Whether `op` runs here; for cache ops, with pages of `page_dtype`.
  virtual bool supports(ModelOp op,
                        kvcache::PageDType page_dtype = kvcache::PageDType::kFP32) const = 0;

  virtual void linear(const LinearParams& p) = 0;
  virtual void rms_norm(const RmsNormParams& p) = 0;
  virtual void rope(const RopeParams& p) = 0;
  virtual void gated_activation(const GatedActivationParams& p) = 0;
  virtual void cache_insert(const CacheInsertParams& p) = 0;
  virtual void pre_attention(const PreAttentionParams& p) = 0;
  virtual void indexer_topk(const IndexerTopkParams& p) = 0;
  virtual void paged_attention(const PagedAttentionParams& p) = 0;
  virtual void router(const RouterParams& p) = 0;
  virtual void moe_dispatch(const MoeDispatchParams& p) = 0;
  virtual void moe_combine(const MoeCombineParams& p) = 0;
};

}  // namespace fp4
