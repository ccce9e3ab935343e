// The interface every compute backend implements. The model is written once against it; the
// CPU backend is the reference and the fallback. An op a backend cannot run in a given shape or
// cache format (the CUDA kernels' head sizes, say) throws fp4::Error naming the op and the
// shape at its first call, which is the model's first step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "backend/model_ops.h"
#include "backend/sample_params.h"

namespace fp4 {

// A point in a backend's order of work: it is reached when every op issued before it has
// finished (an event on a GPU's stream; the wall clock on the CPU, whose ops return done).
class TimeMark {
 public:
  virtual ~TimeMark() = default;
  // Milliseconds from `earlier` (a mark of the same backend) to this one; waits for both.
  virtual double ms_since(const TimeMark& earlier) const = 0;
};

// A recorded sequence of ops (a CUDA graph): replaying it runs the same launches on the same
// buffers, whatever they hold by then, for a fraction of the launch cost.
class CapturedOps {
 public:
  virtual ~CapturedOps() = default;
  virtual void replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Memory the ops take: host memory for the CPU backend, device memory for a GPU's. allocate
  // gives uninitialized memory aligned to 256 bytes (nullptr for 0 bytes). Copies and fills are
  // ordered after the ops already issued; copy_from_host may reuse `src` as soon as it returns;
  // copy_to_host returns once the bytes are on the host.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) noexcept = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void fill_zero(void* dst, size_t bytes) = 0;
  // True when the ops read host memory, so host data (the weights) needs no copy.
  virtual bool uses_host_memory() const = 0;
  // The device memory allocate() draws from, total and free now; zeros for host memory (whose
  // size the engine reads from the operating system).
  struct MemoryStats {
    int64_t total_bytes = 0, free_bytes = 0;
  };
  virtual MemoryStats device_memory() const { return {}; }
  // Memory an op may take for itself, beyond the buffers the model passes it (at most this much
  // at a time): what the engine keeps free besides the activations.
  virtual int64_t op_scratch_bytes() const { return 0; }
  // A mark after the ops issued so far, for timing them (ProfilingBackend). The default reads
  // the wall clock, right for a backend whose ops finish before they return.
  virtual std::unique_ptr<TimeMark> mark_time();

  // Recording: the ops issued between begin_capture and end_capture (and the memory allocated
  // and released among them) are recorded, not run. Only where supports_capture(); nothing in
  // between may read results on the host. abort_capture ends a recording that failed.
  virtual bool supports_capture() const { return false; }
  virtual void begin_capture();
  virtual std::unique_ptr<CapturedOps> end_capture();
  virtual void abort_capture() noexcept {}

  virtual void linear(const LinearParams& p) = 0;
  // Several projections of one input (every part's x, m and k the same): each part's y is what
  // linear would give it, bit for bit. By default one linear after another; a backend may run
  // them as one launch.
  virtual void linears(std::span<const LinearParams> parts) {
    for (const LinearParams& p : parts) linear(p);
  }
  virtual void rms_norm(const RmsNormParams& p) = 0;
  virtual void add_rms_norm(const AddRmsNormParams& p) = 0;
  virtual void gather_rows(const GatherRowsParams& p) = 0;
  virtual void rope(const RopeParams& p) = 0;
  virtual void gated_activation(const GatedActivationParams& p) = 0;
  virtual void cache_insert(const CacheInsertParams& p) = 0;
  virtual void pre_attention(const PreAttentionParams& p) = 0;
  virtual void indexer_topk(const IndexerTopkParams& p) = 0;
  virtual void paged_attention(const PagedAttentionParams& p) = 0;
  virtual void router(const RouterParams& p) = 0;
  virtual void moe_dispatch(const MoeDispatchParams& p) = 0;
  virtual void moe_gather(const MoeGatherParams& p) = 0;
  virtual void expert_gemm(const ExpertGemmParams& p) = 0;
  virtual void moe_combine(const MoeCombineParams& p) = 0;

  // Choosing each row's next token where the logits are (sample_params.h). A backend that
  // cannot leaves sampling to the host sampler (src/sampling), which is the reference, and
  // says so here; its sample() throws.
  virtual bool samples_on_device() const { return false; }
  virtual void sample(const SampleParams& p);
};

}  // namespace fp4
