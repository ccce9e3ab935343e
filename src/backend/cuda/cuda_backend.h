// The CUDA backend: every model op on one GPU, on one stream, so a forward step is a sequence
// of asynchronous launches that only waits where the host needs a result (the logits, an MoE
// layer's expert sizes). Memory comes from the stream-ordered allocator, whose pool keeps what
// a step frees for the next one; while a step is recorded, from the recording arena
// (recording.h), so that the graph's kernels follow one another as they do op by op.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "backend/cuda/indexer_topk.h"
#include "backend/cuda/paged_attention.h"
#include "backend/cuda/recording.h"

struct cublasContext;

namespace fp4::cuda {

class CudaBackend final : public Backend {
 public:
  // Runs on the first visible device (CUDA_VISIBLE_DEVICES picks it), which must be sm_90: the
  // kernels are built for sm_90a. Every thread that calls in uses the default device, so no
  // thread needs to select one.
  CudaBackend();
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // The most a BF16-weight projection takes for its split input and partial products.
  static constexpr int64_t kLinearScratchBytes = int64_t{256} << 20;
  int64_t op_scratch_bytes() const override { return kLinearScratchBytes; }
  // An event recorded on the stream.
  std::unique_ptr<TimeMark> mark_time() override;

 private:
  void init();  // the stream, the pool's policy, cuBLAS
  void release_resources() noexcept;

 public:

  std::string_view name() const override { return "cuda"; }

  void* allocate(size_t bytes) override;
  void release(void* p) noexcept override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  bool uses_host_memory() const override { return false; }
  MemoryStats device_memory() const override;

  // CUDA graphs: the stream is captured (relaxed mode) and the graph instantiated.
  bool supports_capture() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<CapturedOps> end_capture() override;
  void abort_capture() noexcept override;
  // What the last recording's graph held, and the device memory the recordings keep.
  const GraphCensus& last_recording() const { return last_recording_; }
  int64_t recording_arena_bytes() const { return arena_.reserved_bytes(); }
  // Where a recording's buffers come from: the arena (the default), or, for comparisons, the
  // stream-ordered pool as op by op (memory nodes in the graph). Set it before a recording.
  enum class RecordingMemory { kArena, kStreamOrderedPool };
  void set_recording_memory(RecordingMemory memory) { recording_memory_ = memory; }

  // FP32 GEMM on cuBLAS in its pedantic mode: IEEE FP32 products and sums (never TF32), in
  // cuBLAS's order, so results differ from the CPU's only by the order of the sums.
  void linear(const LinearParams& p) override;
  // One skinny launch for the parts it takes (decode sizes), one tensor-core launch for the
  // MXFP8-held parts past its rows, each part's bits those of its own `linear` call.
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
  // The NVFP4 W4A16 kernel: n a multiple of 64, k of 128 (expert_gemm.h).
  void expert_gemm(const ExpertGemmParams& p) override;
  void moe_combine(const MoeCombineParams& p) override;
  bool samples_on_device() const override { return true; }
  void sample(const SampleParams& p) override;

  // How the indexer scores (tensor cores by default; kExact reproduces the CPU's scores bit for
  // bit from the same inputs, for comparisons with the CPU engine). Set it before any step is
  // recorded: a recording replays the kernel it was made with.
  void set_indexer_math(IndexerMath math) { indexer_.math = math; }
  // Where prompt chunks take the prefill attention kernel (paged_attention.h); for comparisons.
  void set_prefill_attention(PrefillKernelUse use) { attention_.prefill = use; }
  // How linear multiplies BF16- and MXFP8-held weights: kAuto streams them through the skinny
  // FP32 kernel for decode-sized inputs (skinny_linear.h), MXFP8 ones through the FP16
  // tensor-core kernel on their codes for decode batches (mxfp8_linear.h), and takes three BF16
  // tensor-core products otherwise (on an MXFP8 weight decoded to BF16); kSplitMma always the
  // latter (for comparisons).
  enum class Bf16Linear { kAuto, kSplitMma };
  void set_bf16_linear(Bf16Linear path) { bf16_linear_ = path; }

  cudaStream_t stream() const { return stream_; }
  // Waits for everything issued so far.
  void synchronize();

 private:
  void linear_bf16_weight(const LinearParams& p);
  void linear_mxfp8_weight(const LinearParams& p);

  cudaStream_t stream_ = nullptr;
  cublasContext* cublas_ = nullptr;

  void* cublas_workspace_ = nullptr;  // cuBLAS's, set once so a captured GEMM allocates nothing
  RecordingArena arena_;  // freed after release_resources() has waited for the stream
  bool recording_ = false;  // a recording is under way and takes its buffers from the arena
  RecordingMemory recording_memory_ = RecordingMemory::kArena;
  GraphCensus last_recording_;
  IndexerTopkOptions indexer_;
  PagedAttentionOptions attention_;
  Bf16Linear bf16_linear_ = Bf16Linear::kAuto;
};

}  // namespace fp4::cuda
