#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include "backend/buffer.h"
#include "backend/cuda/cache_insert.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dense_ops.h"
#include "backend/cuda/expert_gemm.h"
#include "backend/cuda/device.h"
#include "backend/cuda/indexer_topk.h"
#include "backend/cuda/moe_math.h"
#include "backend/cuda/moe_ops.h"
#include "backend/cuda/mxfp8_linear.h"
#include "backend/cuda/paged_attention.h"
#include "backend/cuda/pre_attention.h"
#include "backend/cuda/quantize.h"
#include "backend/cuda/sampler.h"
#include "backend/cuda/skinny_linear.h"
#include "formats/mxfp8.h"

namespace fp4::cuda {
namespace {

#define FP4_CUBLAS_CHECK(expr)                                                              \
  do {                                                                                      \
    const cublasStatus_t fp4_cublas_status = (expr);                                        \
    if (fp4_cublas_status != CUBLAS_STATUS_SUCCESS)                                         \
      ::fp4::fail_internal("cuBLAS error {} ({}) in {}", cublasGetStatusName(fp4_cublas_status), \
                           cublasGetStatusString(fp4_cublas_status), #expr);               \
  } while (0)

// The first visible device: CUDA_VISIBLE_DEVICES chooses it, and it is every thread's default.
constexpr int kDevice = 0;

// The skinny kernel's view of a BF16- or MXFP8-held weight's linear.
detail::SkinnyLinearArgs skinny_args(const LinearParams& p) {
  return {.x = p.x, .w = p.w_bf16, .y = p.y, .m = p.m, .n = p.n, .k = p.k, .w_e4m3 = p.w_e4m3, .w_scales = p.w_scales};
}

}  // namespace

CudaBackend::CudaBackend() {
  FP4_CHECK(device_count() > 0, "no CUDA device is visible");
  const DeviceInfo info = device_info(kDevice);
  FP4_CHECK(info.sm_major == 9 && info.sm_minor == 0,
            "the CUDA device ({}) is sm_{}{}; the kernels are built for sm_90a (Hopper)", info.name,
            info.sm_major, info.sm_minor);
  try {
    init();
  } catch (...) {
    release_resources();
    throw;
  }
}

void CudaBackend::init() {
  FP4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // Keep freed memory in the pool: a step's activations are the next step's.
  keep_freed_memory_in_pool(kDevice);
  cublasHandle_t handle = nullptr;
  FP4_CUBLAS_CHECK(cublasCreate(&handle));
  cublas_ = handle;
  FP4_CUBLAS_CHECK(cublasSetStream(handle, stream_));
  FP4_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH));
  constexpr size_t kCublasWorkspace = size_t{32} << 20;
  FP4_CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspace));
  FP4_CUBLAS_CHECK(cublasSetWorkspace(handle, cublas_workspace_, kCublasWorkspace));
}

CudaBackend::~CudaBackend() { release_resources(); }

void CudaBackend::release_resources() noexcept {
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
}

namespace {

class CudaGraph final : public CapturedOps {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  void replay() override { FP4_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

}  // namespace

namespace {

class EventMark final : public TimeMark {
 public:
  explicit EventMark(cudaStream_t stream) {
    FP4_CUDA_CHECK(cudaEventCreate(&event_));
    const cudaError_t status = cudaEventRecord(event_, stream);
    if (status != cudaSuccess) cudaEventDestroy(event_);
    FP4_CUDA_CHECK(status);
  }
  ~EventMark() override { cudaEventDestroy(event_); }
  EventMark(const EventMark&) = delete;
  EventMark& operator=(const EventMark&) = delete;
  double ms_since(const TimeMark& earlier) const override {
    const auto& e = dynamic_cast<const EventMark&>(earlier);
    FP4_CUDA_CHECK(cudaEventSynchronize(event_));
    float ms = 0;
    FP4_CUDA_CHECK(cudaEventElapsedTime(&ms, e.event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

std::unique_ptr<TimeMark> CudaBackend::mark_time() { return std::make_unique<EventMark>(stream_); }

void CudaBackend::begin_capture() {
  // The recording's inputs were just allocated on this stream; waiting for them first keeps
  // compute-sanitizer from taking the graph's reads of them for reads of unallocated memory.
  // It also means no earlier replay still uses the arena, which this recording reuses.
  synchronize();
  arena_.start();
  FP4_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  recording_ = recording_memory_ == RecordingMemory::kArena;
}

std::unique_ptr<CapturedOps> CudaBackend::end_capture() {
  recording_ = false;
  cudaGraph_t graph = nullptr;
  FP4_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  cudaError_t status = cudaSuccess;
  try {
    last_recording_ = census(graph);
    status = cudaGraphInstantiate(&exec, graph, 0);
  } catch (...) {
    cudaGraphDestroy(graph);
    throw;
  }
  cudaGraphDestroy(graph);
  FP4_CUDA_CHECK(status);
  return std::make_unique<CudaGraph>(exec, stream_);
}

void CudaBackend::abort_capture() noexcept {
  recording_ = false;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

void* CudaBackend::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (recording_) return arena_.take(bytes);
  void* p = nullptr;
  FP4_CUDA_CHECK(cudaMallocAsync(&p, bytes, stream_));
  return p;
}

void CudaBackend::release(void* p) noexcept {
  if (p == nullptr || arena_.give(p)) return;
  (void)cudaFreeAsync(p, stream_);
}

void CudaBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  // From pageable memory (every caller's: std::vector) the call returns once `src` has been
  // staged, so it may be reused at once, as Backend promises. Pinned memory would make the copy
  // truly asynchronous and break that promise: a caller that pins must synchronize first.
  if (bytes > 0) FP4_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  FP4_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  synchronize();
}

void CudaBackend::fill_zero(void* dst, size_t bytes) {
  if (bytes > 0) FP4_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
}

Backend::MemoryStats CudaBackend::device_memory() const {
  size_t free_bytes = 0, total_bytes = 0;
  FP4_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return {.total_bytes = static_cast<int64_t>(total_bytes), .free_bytes = static_cast<int64_t>(free_bytes)};
}

void CudaBackend::synchronize() { FP4_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CudaBackend::linear(const LinearParams& p) {
  FP4_CHECK(p.m >= 0 && p.n >= 0 && p.k >= 0, "linear: negative size m={} n={} k={}", p.m, p.n, p.k);
  FP4_CHECK(linear_weight_forms(p) == 1 || p.n * p.k == 0,
            "linear: exactly one of w, w_bf16 and w_e4m3 must be given");
  FP4_CHECK(p.w_e4m3 == nullptr || (p.w_scales != nullptr && p.k % kMxfp8BlockElems == 0),
            "linear: an MXFP8 weight needs its scales and k a multiple of {} (k={})", kMxfp8BlockElems, p.k);
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  FP4_CHECK(p.m <= kMaxInt && p.n <= kMaxInt && p.k <= kMaxInt, "linear: m={} n={} k={} exceed cuBLAS's int",
            p.m, p.n, p.k);
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {
    fill_zero(p.y, static_cast<size_t>(p.m * p.n) * sizeof(float));
    return;
  }
  if (p.w_bf16 != nullptr) {
    linear_bf16_weight(p);
    return;
  }
  if (p.w_e4m3 != nullptr) {
    linear_mxfp8_weight(p);
    return;
  }
  // A row-major [r, c] matrix is a column-major [c, r] one, so cuBLAS computes
  // y^T[n, m] = w[n, k] x^T[k, m], reading w's memory as the column-major k x n matrix w^T
  // (hence OP_T) and x's as x^T.
  const float one = 1.0f, zero = 0.0f;
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  FP4_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_PEDANTIC_MATH));
  FP4_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, p.w, k, p.x, k,
                               &zero, p.y, n));
}

// Each part's y keeps the bits its own `linear` call gives it, so a part joins a launch only
// where that call would take the same kernel: the parts the skinny kernel takes (all of a
// decode token's, or the narrow ones of 5 to 8 rows) go in one skinny launch, those of the
// first such part's weight form; MXFP8-held parts past the skinny kernel's rows, two or more,
// in one launch of the tensor-core kernel on the codes; any other part on its own.
void CudaBackend::linears(std::span<const LinearParams> parts) {
  const auto count = static_cast<int>(parts.size());
  if (bf16_linear_ != Bf16Linear::kAuto || count < 2 || count > detail::kSkinnyMaxParts ||
      count > detail::kMxfp8LinearMaxParts) {
    Backend::linears(parts);
    return;
  }
  std::array<detail::SkinnyLinearArgs, detail::kSkinnyMaxParts> skinny{};
  std::array<detail::Mxfp8LinearArgs, detail::kMxfp8LinearMaxParts> mma{};
  std::array<const LinearParams*, detail::kSkinnyMaxParts> mma_parts{}, alone{};
  int skinny_count = 0, mma_count = 0, alone_count = 0;
  bool skinny_mx = false;
  for (const LinearParams& p : parts) {
    const bool shared_input = p.w == nullptr && linear_weight_forms(p) == 1 && p.x == parts[0].x &&
                              p.m == parts[0].m && p.k == parts[0].k;
    const detail::SkinnyLinearArgs args = skinny_args(p);
    const bool mx = p.w_e4m3 != nullptr;
    if (shared_input && detail::skinny_linear_fits(args)) {
      if (skinny_count == 0) skinny_mx = mx;
      if (mx == skinny_mx) {
        skinny[skinny_count++] = args;
        continue;
      }
    } else if (shared_input && mx && p.w_scales != nullptr) {
      mma_parts[mma_count] = &p;
      mma[mma_count++] = {.x = p.x, .w_e4m3 = p.w_e4m3, .w_scales = p.w_scales, .y = p.y, .m = p.m, .n = p.n, .k = p.k};
      continue;
    }
    alone[alone_count++] = &p;
  }
  if (mma_count == 1 || (mma_count > 1 && !detail::mxfp8_linear_group_fits(mma.data(), mma_count))) {
    for (int i = 0; i < mma_count; ++i) alone[alone_count++] = mma_parts[i];
    mma_count = 0;
  }
  if (skinny_count > 0) FP4_CUDA_CHECK(detail::launch_skinny_linear_group(skinny.data(), skinny_count, stream_));
  if (mma_count > 0) {
    Buffer<uint8_t> workspace(*this,
                              static_cast<size_t>(detail::mxfp8_linear_group_workspace_bytes(mma.data(), mma_count)));
    FP4_CUDA_CHECK(detail::launch_mxfp8_linear_group(mma.data(), mma_count, workspace.data(), stream_));
  }
  for (int i = 0; i < alone_count; ++i) linear(*alone[i]);
}

// The weight's values are BF16, so x . w is computed as three BF16 tensor-core products: x is
// split exactly into x_hi + x_mid + x_lo, each BF16 (8 significant bits apiece, 24 in all: an
// FP32's), the three stacked as 3m rows of one GEMM so that w is read once, each product of
// two BF16s exact and accumulated in FP32 (tensor cores may truncate), and the three partial
// results summed: within about three times an FP32 GEMM's error bound (cuda_backend_test
// derives it), for half the weight bytes and the BF16 tensor-core rate. Long inputs (prefill)
// run in row chunks so that the pieces and partials stay within kLinearScratchBytes. Decode-sized
// inputs take one kernel of FP32 multiply-adds instead (skinny_linear.h): as exact as an FP32
// GEMM, and the weight read at the copy bandwidth's pace rather than in three launches.
void CudaBackend::linear_bf16_weight(const LinearParams& p) {
  const detail::SkinnyLinearArgs skinny = skinny_args(p);
  if (bf16_linear_ == Bf16Linear::kAuto && detail::skinny_linear_fits(skinny)) {
    FP4_CUDA_CHECK(detail::launch_skinny_linear(skinny, stream_));
    return;
  }
  const int64_t per_row = 3 * (p.k * int64_t{sizeof(uint16_t)} + p.n * int64_t{sizeof(float)});
  const int64_t chunk = std::clamp<int64_t>(kLinearScratchBytes / per_row, 1, p.m);
  FP4_CHECK(3 * chunk <= std::numeric_limits<int>::max(), "linear: {} rows exceed cuBLAS's int", 3 * chunk);
  Buffer<uint16_t> pieces(*this, static_cast<size_t>(3 * chunk * p.k));
  Buffer<float> parts(*this, static_cast<size_t>(3 * chunk * p.n));
  const float one = 1.0f, zero = 0.0f;
  // Tensor cores on (the default math); no reduced-precision reduction: FP32 throughout.
  FP4_CUBLAS_CHECK(cublasSetMathMode(
      cublas_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  const int n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  for (int64_t row = 0; row < p.m; row += chunk) {
    const int64_t rows = std::min(chunk, p.m - row);
    FP4_CUDA_CHECK(detail::launch_split_bf16x3(p.x + row * p.k, rows * p.k, pieces.data(), stream_));
    FP4_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, static_cast<int>(3 * rows), k, &one,
                                  p.w_bf16, CUDA_R_16BF, k, pieces.data(), CUDA_R_16BF, k, &zero, parts.data(),
                                  CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    FP4_CUDA_CHECK(detail::launch_sum_thirds(parts.data(), rows * p.n, p.y + row * p.n, stream_));
  }
}

// MXFP8-held weights hold BF16 values (LinearParams). Up to 4 rows of x stream the codes through
// the skinny kernel, within its bound; up to 32 (decode batches) go to the FP16 tensor-core kernel
// on the codes (mxfp8_linear.h), within its bound; longer inputs decode the weight into BF16 in
// stream-ordered scratch, exactly, and take the three products on it, with the BF16 form's bits
// (a prompt chunk's GEMM outweighs the one pass over the weight that this adds; at 64 to 256 rows
// it costs about 50 us on a [8192, 6144] weight, which is why the engine holds such weights in
// BF16 for large decode batches: engine/loaded_model.h).
void CudaBackend::linear_mxfp8_weight(const LinearParams& p) {
  const detail::SkinnyLinearArgs skinny = skinny_args(p);
  if (bf16_linear_ == Bf16Linear::kAuto && detail::skinny_linear_fits(skinny)) {
    FP4_CUDA_CHECK(detail::launch_skinny_linear(skinny, stream_));
    return;
  }
  const detail::Mxfp8LinearArgs mma{
      .x = p.x, .w_e4m3 = p.w_e4m3, .w_scales = p.w_scales, .y = p.y, .m = p.m, .n = p.n, .k = p.k};
  if (bf16_linear_ == Bf16Linear::kAuto && detail::mxfp8_linear_fits(mma)) {
    Buffer<uint8_t> workspace(*this, static_cast<size_t>(detail::mxfp8_linear_workspace_bytes(mma)));
    FP4_CUDA_CHECK(detail::launch_mxfp8_linear(mma, workspace.data(), stream_));
    return;
  }
  Buffer<uint16_t> w(*this, static_cast<size_t>(p.n * p.k));
  cuda::dequantize(BlockFormat::kMxfp8,
                   {.values = p.w_e4m3, .scales = p.w_scales, .rows = p.n, .cols = p.k, .output = w.data(),
                    .output_dtype = DType::kBF16, .output_row_stride = p.k},
                   stream_);
  LinearParams bf16 = p;
  bf16.w_e4m3 = bf16.w_scales = nullptr;
  bf16.w_bf16 = w.data();
  linear_bf16_weight(bf16);
}

void CudaBackend::rms_norm(const RmsNormParams& p) { cuda::rms_norm(p, stream_); }
void CudaBackend::add_rms_norm(const AddRmsNormParams& p) { cuda::add_rms_norm(p, stream_); }
void CudaBackend::gather_rows(const GatherRowsParams& p) { cuda::gather_rows(p, stream_); }
void CudaBackend::rope(const RopeParams& p) { cuda::rope(p, stream_); }
void CudaBackend::gated_activation(const GatedActivationParams& p) { cuda::gated_activation(p, stream_); }
void CudaBackend::cache_insert(const CacheInsertParams& p) { cuda::cache_insert(p, stream_); }
void CudaBackend::pre_attention(const PreAttentionParams& p) { cuda::pre_attention(p, stream_); }
// The ops with scratch take it from allocate(), so that a recording holds no memory node.
void CudaBackend::indexer_topk(const IndexerTopkParams& p) {
  Buffer<uint8_t> workspace(*this, cuda::indexer_topk_workspace_bytes(p, indexer_));
  cuda::indexer_topk(p, workspace.data(), workspace.size(), stream_, indexer_);
}
void CudaBackend::paged_attention(const PagedAttentionParams& p) {
  Buffer<uint8_t> workspace(*this, cuda::paged_attention_workspace_bytes(p, attention_));
  cuda::paged_attention(p, workspace.data(), workspace.size(), stream_, attention_);
}
void CudaBackend::router(const RouterParams& p) {
  FP4_CHECK(p.forced_ids == nullptr, "cuda router: forced experts are the CPU reference's (it follows another engine)");
  cuda::router(p, stream_);
}
void CudaBackend::moe_dispatch(const MoeDispatchParams& p) { cuda::moe_dispatch(p, stream_); }
void CudaBackend::moe_gather(const MoeGatherParams& p) { cuda::moe_gather(p, stream_); }
void CudaBackend::expert_gemm(const ExpertGemmParams& p) {
  Buffer<uint8_t> workspace(*this, cuda::expert_gemm_workspace_bytes(p));
  cuda::expert_gemm(p, workspace.data(), workspace.size(), stream_);
}
void CudaBackend::moe_combine(const MoeCombineParams& p) { cuda::moe_combine(p, stream_); }
void CudaBackend::sample(const SampleParams& p) { cuda::sample(p, stream_); }

}  // namespace fp4::cuda
