// Everything loaded for one model directory: its config, weights, tokenizer (when the directory
// has one) and the backend that runs it. Caches are sized separately, per use.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "model/config.h"
#include "model/kv_memory.h"
#include "model/model_weights.h"
#include "model/resident_weights.h"
#include "tokenizer/tokenizer.h"

namespace fp4::engine {

struct LoadOptions {
  std::string model_dir;
  bool progress = false;  // force the loading progress bar even when stderr is not a terminal
  std::string device = "auto";  // --device: cuda, cpu, or auto (cuda when a Hopper GPU is visible)
  // --prefill-attention: where prompt chunks take the GPU's prefill attention kernel: "dense"
  // layers (the default), "all" layers, or "never" (the decode kernel, one CTA per token).
  // The CPU backend has one attention op and ignores it.
  std::string prefill_attention = "dense";
  // --mxfp8-weights: how projections whose values are MXFP8 blocks (a checkpoint's MXFP8
  // tensors) are held on a GPU: "mxfp8" (33 bytes per 32 values, read as codes), "bf16" (twice
  // the bytes), or "auto": MXFP8 when no decode step runs more than kMxfp8MaxDecodeBatch
  // sequences (max_decode_batch), where the MXFP8 kernels measured faster (bench/RESULTS.md,
  // 2026-12-07: a layer at one token 11% faster, at 16 within 4% either way, at 64 11-25%
  // slower), else BF16.
  std::string mxfp8_weights = "auto";
  int64_t max_decode_batch = 1;
};

constexpr int64_t kMxfp8MaxDecodeBatch = 16;

// The backend for a --device value: "cpu", "cuda" (an fp4::Error when this build has no CUDA
// backend, no GPU is visible or it is not Hopper) or "auto" (the GPU when there is a Hopper one,
// else the CPU).
std::unique_ptr<Backend> make_backend(const std::string& device);

struct LoadedModel {
  model::ModelConfig config;
  model::ModelWeights weights;
  std::optional<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  // The weights where the backend reads them (after `backend`: released before it).
  std::unique_ptr<model::ResidentWeights> resident;
  double load_seconds = 0;
};

LoadedModel load_model(const LoadOptions& options);

// Cache page formats from the --kv-cache-dtype / --index-cache-dtype spellings: auto, fp32,
// bf16, fp8 (fp8_e4m3), nvfp4. "auto" keeps the model's compute precision: FP32 on the CPU
// backend. An index cache of "auto" follows the main cache. The indexer's query
// (--index-query-dtype: fp32, fp8, fp8x2) and attention's operands (--attention-operands:
// fp32, 16bit) ride along.
kvcache::PageDType parse_cache_flag(const std::string& text, const std::string& flag);
model::CacheFormats cache_formats(const std::string& kv_flag, const std::string& index_flag,
                                  const std::string& index_query_flag = "fp32",
                                  const std::string& attention_operands_flag = "fp32");

}  // namespace fp4::engine
