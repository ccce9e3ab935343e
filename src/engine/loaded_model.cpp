#include "engine/loaded_model.h"

#include <chrono>
#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#if FP4_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device.h"
#endif
#include "core/check.h"
#include "kvcache/cache_dtype.h"
#include "model/checkpoint.h"

namespace fp4::engine {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  FP4_CHECK(device == "auto" || device == "cpu" || device == "cuda",
            "--device {}: expected auto, cpu or cuda", device);
  if (device == "cpu") return std::make_unique<cpu::CpuBackend>();
#if FP4_HAVE_CUDA
  const bool gpu = cuda::device_count() > 0;
  FP4_CHECK(gpu || device == "auto", "--device cuda: no CUDA device is visible");
  // auto takes the GPU only where the kernels run (sm_90); cuda on another GPU names it.
  if (gpu && (device == "cuda" || cuda::device_info(0).sm_major == 9)) return std::make_unique<cuda::CudaBackend>();
#else
  FP4_CHECK(device == "auto", "--device cuda: this build of fp4serve has no CUDA backend");
#endif
  return std::make_unique<cpu::CpuBackend>();
}

LoadedModel load_model(const LoadOptions& options) {
  namespace fs = std::filesystem;
  // The backend first: a bad --device fails before minutes of loading.
  std::unique_ptr<Backend> backend = make_backend(options.device);
  FP4_CHECK(options.prefill_attention == "dense" || options.prefill_attention == "all" ||
            options.prefill_attention == "never",
            "--prefill-attention {}: expected dense, all or never", options.prefill_attention);
  FP4_CHECK(options.mxfp8_weights == "auto" || options.mxfp8_weights == "mxfp8" || options.mxfp8_weights == "bf16",
            "--mxfp8-weights {}: expected auto, mxfp8 or bf16", options.mxfp8_weights);
  const bool hold_mxfp8 = options.mxfp8_weights == "mxfp8" ||
                          (options.mxfp8_weights == "auto" && options.max_decode_batch <= kMxfp8MaxDecodeBatch);
#if FP4_HAVE_CUDA
  if (auto* gpu = dynamic_cast<cuda::CudaBackend*>(backend.get())) {
    gpu->set_prefill_attention(options.prefill_attention == "all"     ? cuda::PrefillKernelUse::kAll
                               : options.prefill_attention == "never" ? cuda::PrefillKernelUse::kNever
                                                                      : cuda::PrefillKernelUse::kDense);
  }
#endif
  const auto start = std::chrono::steady_clock::now();
  FP4_CHECK(fs::is_directory(options.model_dir), "--model {}: not a directory", options.model_dir);
  LoadedModel m;
  m.config = model::load_model_config(options.model_dir);
  model::CheckpointOptions ckpt_options;
  if (options.progress) ckpt_options.progress = model::ProgressMode::kAlways;
  const model::Checkpoint checkpoint(options.model_dir, ckpt_options);
  m.weights = model::load_model_weights(checkpoint, m.config);
  const fs::path tok = fs::path(options.model_dir) / "tokenizer.json";
  if (fs::exists(tok)) {
    m.tokenizer = tokenizer::Tokenizer::from_file(tok);
    FP4_CHECK(m.tokenizer->vocab_size() <= m.config.vocab_size,
              "{}: {} tokens, more than the model's vocab_size {}", tok.string(),
              m.tokenizer->vocab_size(), m.config.vocab_size);
  }
  m.backend = std::move(backend);
  m.resident = std::make_unique<model::ResidentWeights>(
      m.weights, *m.backend, hold_mxfp8 ? model::ResidentWeights::Mxfp8::kHold : model::ResidentWeights::Mxfp8::kAsBf16);
  m.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return m;
}

kvcache::PageDType parse_cache_flag(const std::string& text, const std::string& flag) {
  if (text == "auto" || text == "fp32") return kvcache::PageDType::kFP32;
  return kvcache::page_dtype(kvcache::parse_cache_dtype(text, flag, false));
}

model::CacheFormats cache_formats(const std::string& kv_flag, const std::string& index_flag,
                                  const std::string& index_query_flag,
                                  const std::string& attention_operands_flag) {
  model::CacheFormats f;
  f.kv = parse_cache_flag(kv_flag, "--kv-cache-dtype");
  f.index = index_flag == "auto" ? f.kv : parse_cache_flag(index_flag, "--index-cache-dtype");
  if (index_query_flag == "fp8") f.index_query = IndexQueryFormat::kE4M3;
  else if (index_query_flag == "fp8x2") f.index_query = IndexQueryFormat::kE4M3x2;
  else FP4_CHECK(index_query_flag == "fp32", "--index-query-dtype: expected fp32, fp8 or fp8x2, got '{}'", index_query_flag);
  if (attention_operands_flag == "16bit") f.attention_operands = AttentionOperands::k16Bit;
  else FP4_CHECK(attention_operands_flag == "fp32", "--attention-operands: expected fp32 or 16bit, got '{}'",
                 attention_operands_flag);
  return f;
}

}  // namespace fp4::engine
