#include "model/kv_memory.h"

#include "core/check.h"

namespace fp4::model {
namespace {

LayerCache layout_layer(const ModelConfig& c, CacheFormats f, bool sparse) {
  LayerCache l;
  l.kv = kvcache::kv_page_layout(f.kv, static_cast<int>(c.num_kv_heads),
                                 static_cast<int>(c.head_dim));
  l.sparse = sparse;
  if (sparse) l.index = kvcache::index_page_layout(f.index, static_cast<int>(c.index_head_dim));
  return l;
}

}  // namespace

int64_t KvMemory::page_bytes(const ModelConfig& c, CacheFormats f) {
  int64_t bytes = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerCache l = layout_layer(c, f, c.sparse_layer[i]);
    bytes += l.kv.page_bytes + (l.sparse ? l.index.page_bytes : 0);
  }
  return bytes;
}

KvMemory::KvMemory(const ModelConfig& c, CacheFormats formats, int64_t num_pages,
                   Backend& backend)
    : formats_(formats), num_pages_(num_pages) {
  FP4_CHECK(num_pages > 0, "the KV cache needs at least one page, got {}", num_pages);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerCache l = layout_layer(c, formats, c.sparse_layer[i]);
    // Zeroed: a page slot not yet written decodes to zeros in every format.
    l.kv_pages = Buffer<uint8_t>(backend, static_cast<size_t>(num_pages * l.kv.page_bytes));
    l.kv_pages.zero();
    if (l.sparse) {
      l.index_pages = Buffer<uint8_t>(backend, static_cast<size_t>(num_pages * l.index.page_bytes));
      l.index_pages.zero();
    }
    layers_.push_back(std::move(l));
  }
}

}  // namespace fp4::model
