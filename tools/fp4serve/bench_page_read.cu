// The page-read kernel of bench_page_read.h: each warp reads whole pages, 512 contiguous bytes
// an instruction, 16 such loads in flight a lane before it touches their values, and reads the
// next page's block-table entry one page ahead (as the indexer's copy cursor does), so that
// only the pages' own bytes are waited on. The grid is one wave of resident CTAs.
#include <cuda_runtime.h>

#include "tools/fp4serve/bench_page_read.h"

namespace fp4::bench::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kBatch = 16;  // loads a lane issues before it uses them

// kPerLane: 16-byte loads of one page per lane (page bytes / 512).
template <int kPerLane>
__global__ void __launch_bounds__(kThreads) page_read_kernel(const uint4* pool, const int32_t* table, int64_t pages,
                                                            uint32_t* out) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = (int64_t{blockIdx.x} * kThreads + threadIdx.x) / 32;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  uint32_t acc = 0;
  int64_t entry = warp < pages ? table[warp] : 0;
  for (int64_t i = warp; i < pages; i += warps) {
    const uint4* page = pool + entry * (32 * kPerLane) + lane;
    entry = i + warps < pages ? table[i + warps] : 0;
#pragma unroll
    for (int b = 0; b < kPerLane; b += kBatch) {
      uint4 x[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (b + j < kPerLane) x[j] = __ldcs(page + 32 * (b + j));  // streamed: read once
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (b + j < kPerLane) acc ^= x[j].x ^ x[j].y ^ x[j].z ^ x[j].w;
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xFFFFFFFFu, acc, o);
  if (lane == 0) out[warp] = acc;
}

using Kernel = void (*)(const uint4*, const int32_t*, int64_t, uint32_t*);

// The index page sizes at head_dim 128: NVFP4 (72 bytes a token), FP8 (128) and BF16 (256).
Kernel kernel_for(int64_t page_bytes) {
  switch (page_bytes) {
    case 9216: return page_read_kernel<18>;
    case 16384: return page_read_kernel<32>;
    case 32768: return page_read_kernel<64>;
  }
  return nullptr;
}

// One wave: the CTAs the occupancy calculator fits on every SM. Any page size gives the same
// grid (the one of the largest kernel), so that page_read_warps needs no size.
cudaError_t grid_ctas(unsigned* ctas) {
  int device = 0, sms = 0, per_sm = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (const cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, page_read_kernel<64>, kThreads, 0);
  *ctas = static_cast<unsigned>(sms * (per_sm > 0 ? per_sm : 1));
  return e;
}

}  // namespace

cudaError_t page_read_warps(int64_t* warps) {
  unsigned ctas = 0;
  const cudaError_t e = grid_ctas(&ctas);
  *warps = int64_t{ctas} * (kThreads / 32);
  return e;
}

cudaError_t launch_page_read(const uint8_t* pool, int64_t page_bytes, const int32_t* table, int64_t pages,
                             uint32_t* out, cudaStream_t stream) {
  const Kernel kernel = kernel_for(page_bytes);
  if (kernel == nullptr) return cudaErrorInvalidValue;
  unsigned ctas = 0;
  if (const cudaError_t e = grid_ctas(&ctas); e != cudaSuccess) return e;
  kernel<<<ctas, kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(pool), table, pages, out);
  return cudaGetLastError();
}

}  // namespace fp4::bench::detail
