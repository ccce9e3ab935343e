// Cache-write kernel: one thread per 16-value block of one (token, plane, group) row, the
// NVFP4 quantization unit, so a thread owns whole bytes of codes and its block's scale.
#include <cuda_runtime.h>

#include "backend/cuda/cache_insert.h"
#include "backend/cuda/cache_write.cuh"

namespace fp4::cuda::detail {
namespace {

// Thread -> (token, plane, group, block), the block fastest so that a warp's loads are
// contiguous. 32-bit index arithmetic: the launcher checks the total fits.
__global__ void __launch_bounds__(kInsertThreads) cache_insert_kernel(InsertArgs a) {
  const CacheTarget& c = a.cache;
  const uint32_t per_token = static_cast<uint32_t>(c.planes * c.groups * c.chunks);
  const uint32_t i = blockIdx.x * kInsertThreads + threadIdx.x;
  if (i >= per_token * static_cast<uint32_t>(a.tokens)) return;
  const uint32_t t = i / per_token;
  uint32_t r = i - t * per_token;
  const int chunk = static_cast<int>(r % c.chunks);
  r /= c.chunks;
  const int g = static_cast<int>(r % c.groups);
  const int plane = static_cast<int>(r / c.groups);
  const float* src = a.src[plane] + t * a.vector_elems + int64_t{g} * c.group_elems + chunk * cache_write::kBlock;
  cache_write::write_cache_block<true>(c, a.slots[t], plane, g, chunk, src);
}

}  // namespace

cudaError_t launch_cache_insert(const InsertArgs& a, cudaStream_t stream) {
  const CacheTarget& c = a.cache;
  const uint64_t total = static_cast<uint64_t>(a.tokens) * c.planes * c.groups * c.chunks;
  const unsigned grid = static_cast<unsigned>((total + kInsertThreads - 1) / kInsertThreads);
  cache_insert_kernel<<<grid, kInsertThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
