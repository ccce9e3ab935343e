// Cache writes on the GPU: fp4::cpu::cache_insert's contract (backend/model_ops.h), byte for
// byte what kvcache::write_token / write_index_token write, in every page format. One thread
// per (token, K or V, group, 16-value block): the NVFP4 quantization unit, so a thread owns
// whole bytes of codes and its block's scale.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/model_ops.h"

namespace fp4::cuda {

// Pointers in `p` are device pointers, except p.layout, a host object read at the call.
// Asynchronous on `stream`. A slot outside the pool (negative included) is skipped, since the
// device cannot throw as the CPU reference does; tokens of one step must have distinct slots.
void cache_insert(const CacheInsertParams& p, cudaStream_t stream);

namespace detail {

// One paged cache as the device writers need it, by value: plane 0 is K, plane 1 is V.
struct CacheTarget {
  uint8_t* pool = nullptr;  // [num_pages, page_bytes]
  int64_t num_pages = 0, page_bytes = 0;
  int64_t code_row_bytes = 0, scale_row_bytes = 0;
  int64_t codes_offset[2] = {0, 0}, scales_offset[2] = {0, 0};
  int page_tokens = 0, groups = 0, group_elems = 0;
  int chunks = 0;            // 16-value blocks per group, the last one short when not NVFP4
  int planes = 1;
  kvcache::PageDType dtype = kvcache::PageDType::kFP32;
  float scale[2] = {1.0f, 1.0f};  // FP8 scale or NVFP4 global scale per plane
};

// The target for `layout` after cache_insert's checks of the layout and the scales (which name
// `op` in their errors).
CacheTarget cache_target(const kvcache::PageLayout& layout, uint8_t* pool, int64_t num_pages,
                         kvcache::KvScales scales, const char* op);

struct InsertArgs {
  CacheTarget cache;
  const float* src[2] = {nullptr, nullptr};  // [tokens, heads, head_dim]
  const int64_t* slots = nullptr;            // [tokens]
  int64_t tokens = 0;
  int64_t vector_elems = 0;                  // heads x head_dim
};

constexpr int kInsertThreads = 256;

cudaError_t launch_cache_insert(const InsertArgs& a, cudaStream_t stream);

}  // namespace detail
}  // namespace fp4::cuda
