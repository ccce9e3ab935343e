// The paged caches of every layer, in the backend's memory: one pool of pages per layer for K/V and, on
// MSA layers, one for index K. A page id means the same 128 tokens in every pool, so one block
// table per sequence addresses all of them (vLLM keeps one per cache group; the pages of the
// two caches are allocated and freed together, so one id suffices).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/buffer.h"
#include "backend/model_ops.h"
#include "kvcache/page_io.h"
#include "kvcache/page_layout.h"
#include "model/config.h"

namespace fp4::model {

struct CacheFormats {
  kvcache::PageDType kv = kvcache::PageDType::kFP32;
  kvcache::PageDType index = kvcache::PageDType::kFP32;
  // How the indexer takes its query against the index cache (FP32, or rounded to FP8).
  IndexQueryFormat index_query = IndexQueryFormat::kFP32;
  // What attention multiplies: Q and the softmax weights in FP32, or rounded to 16 bits.
  AttentionOperands attention_operands = AttentionOperands::kFP32;
};

struct LayerCache {
  kvcache::PageLayout kv;
  Buffer<uint8_t> kv_pages;        // [num_pages, kv.page_bytes]
  kvcache::KvScales kv_scales;     // FP8 scale / NVFP4 global scale, dequantization direction
  bool sparse = false;
  kvcache::PageLayout index;
  Buffer<uint8_t> index_pages;     // [num_pages, index.page_bytes] on MSA layers
  float index_scale = 1.0f;
};

class KvMemory {
 public:
  // Zeroed pools allocated from `backend`, which must outlive this.
  KvMemory(const ModelConfig& config, CacheFormats formats, int64_t num_pages, Backend& backend);

  // Bytes one page takes across all layers' caches.
  static int64_t page_bytes(const ModelConfig& config, CacheFormats formats);

  int64_t num_pages() const { return num_pages_; }
  CacheFormats formats() const { return formats_; }
  LayerCache& layer(int64_t i) { return layers_[i]; }
  const LayerCache& layer(int64_t i) const { return layers_[i]; }

 private:
  CacheFormats formats_;
  int64_t num_pages_;
  std::vector<LayerCache> layers_;
};

}  // namespace fp4::model
