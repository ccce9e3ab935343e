// The page-read kernels of bench_page_read.h. Both walk a warp's pages (table[w], table[w + W],
// ...) reading the next page's block-table entry one page ahead, as the indexer's copy cursor
// does, so that only the pages' own bytes are waited on, and both grids are one wave of
// resident CTAs.
// - kLoads: 16-byte loads, 512 contiguous bytes a warp instruction, a batch of 16 a lane issued
//   before their values are used.
// - kBulk: lane 0 of each warp copies the pages in pieces of up to 4 KB with cp.async.bulk into
//   a ring of 4 pieces, each completed on its own mbarrier; the warp XORs a landed piece out
//   of shared memory and hands its slot back to the copy of the piece 4 ahead.
#include <cuda_runtime.h>

#include "tools/fp4serve/bench_page_read.h"

namespace fp4::bench::detail {
namespace {

constexpr int kLoadThreads = 256;
constexpr int kBatch = 16;  // loads a lane issues before it uses them

// kPerLane: 16-byte loads of one page per lane (page bytes / 512).
template <int kPerLane>
__global__ void __launch_bounds__(kLoadThreads) page_read_loads(const uint4* pool, const int32_t* table, int64_t pages,
                                                               uint32_t* out) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = (int64_t{blockIdx.x} * kLoadThreads + threadIdx.x) / 32;
  const int64_t warps = int64_t{gridDim.x} * (kLoadThreads / 32);
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

constexpr int kBulkThreads = 128;
constexpr int kBulkWarps = kBulkThreads / 32;
constexpr int kPiece = 4096;  // bytes of one bulk copy
constexpr int kSlots = 4;     // pieces in flight a warp
constexpr int kBulkSmem = kBulkWarps * kSlots * kPiece;

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A piece's copy: its bytes expected on the slot's barrier (by the one arrival the barrier
// counts), then the copy that completes them.
__device__ __forceinline__ void bulk_piece(void* dst, const void* src, int bytes, uint64_t* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_addr(bar)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   shared_addr(dst)),
               "l"(src), "r"(bytes), "r"(shared_addr(bar))
               : "memory");
}

// A piece that never lands (a copy that faulted) stops the kernel with an error after a few
// million tries instead of hanging the benchmark.
__device__ __forceinline__ void wait_phase(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  for (int tries = 0; !done; ++tries) {
    if (tries == (1 << 22)) __trap();
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_addr(bar)), "r"(parity)
        : "memory");
  }
}

template <int kPageBytes>
__global__ void __launch_bounds__(kBulkThreads) page_read_bulk(const uint8_t* pool, const int32_t* table, int64_t pages,
                                                              uint32_t* out) {
  constexpr int kPieces = (kPageBytes + kPiece - 1) / kPiece;
  static_assert(kPageBytes % 16 == 0, "bulk copies move multiples of 16 bytes");
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kBulkWarps][kSlots];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  uint8_t* ring = smem + w * kSlots * kPiece;
  if (lane < kSlots) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_addr(&bars[w][lane])) : "memory");
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncwarp();
  const int64_t warp = int64_t{blockIdx.x} * kBulkWarps + w, warps = int64_t{gridDim.x} * kBulkWarps;
  // The copy cursor (lane 0's): page `next_page` at piece `next_piece`, its table entry read.
  int64_t next_page = warp, entry = warp < pages ? table[warp] : 0;
  int next_piece = 0;
  auto issue = [&](int slot) {
    if (next_page >= pages) return;
    const int bytes = kPageBytes - next_piece * kPiece < kPiece ? kPageBytes - next_piece * kPiece : kPiece;
    bulk_piece(ring + slot * kPiece, pool + entry * kPageBytes + next_piece * kPiece, bytes, &bars[w][slot]);
    if (++next_piece == kPieces) {
      next_piece = 0;
      next_page += warps;
      entry = next_page < pages ? table[next_page] : 0;
    }
  };
  if (lane == 0) {
#pragma unroll
    for (int s = 0; s < kSlots; ++s) issue(s);
  }
  uint32_t acc = 0, parity = 0;
  int slot = 0, piece = 0;
  for (int64_t page = warp; page < pages;) {
    const int bytes = kPageBytes - piece * kPiece < kPiece ? kPageBytes - piece * kPiece : kPiece;
    wait_phase(&bars[w][slot], parity);
    for (int at = 16 * lane; at < bytes; at += 512) {
      const uint4 x = *reinterpret_cast<const uint4*>(ring + slot * kPiece + at);
      acc ^= x.x ^ x.y ^ x.z ^ x.w;
    }
    __syncwarp();  // every lane is done with the slot before its next copy
    if (lane == 0) issue(slot);
    if (++piece == kPieces) {
      piece = 0;
      page += warps;
    }
    if (++slot == kSlots) {
      slot = 0;
      parity ^= 1;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xFFFFFFFFu, acc, o);
  if (lane == 0) out[warp] = acc;
}

struct Launch {
  const void* kernel = nullptr;
  int threads = 0, smem = 0;
};

// The index page sizes at head_dim 128: NVFP4 (72 bytes a token), FP8 (128) and BF16 (256).
Launch launch_for(PageRead how, int64_t page_bytes) {
  if (how == PageRead::kLoads) {
    switch (page_bytes) {
      case 9216: return {reinterpret_cast<const void*>(page_read_loads<18>), kLoadThreads, 0};
      case 16384: return {reinterpret_cast<const void*>(page_read_loads<32>), kLoadThreads, 0};
      case 32768: return {reinterpret_cast<const void*>(page_read_loads<64>), kLoadThreads, 0};
    }
  } else {
    switch (page_bytes) {
      case 9216: return {reinterpret_cast<const void*>(page_read_bulk<9216>), kBulkThreads, kBulkSmem};
      case 16384: return {reinterpret_cast<const void*>(page_read_bulk<16384>), kBulkThreads, kBulkSmem};
      case 32768: return {reinterpret_cast<const void*>(page_read_bulk<32768>), kBulkThreads, kBulkSmem};
    }
  }
  return {};
}

// Past 48 KB a kernel's dynamic shared memory must be asked for (per device).
cudaError_t allow_smem(const Launch& l) {
  return l.smem > 0 ? cudaFuncSetAttribute(l.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, l.smem) : cudaSuccess;
}

}  // namespace

// One wave: the CTAs the occupancy calculator fits on every SM (the same for every page size of
// one mechanism, so that the count needs no size).
cudaError_t page_read_warps(PageRead how, int64_t* warps) {
  const Launch l = launch_for(how, 32768);
  if (const cudaError_t e = allow_smem(l); e != cudaSuccess) return e;
  int device = 0, sms = 0, per_sm = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (const cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, l.kernel, l.threads, l.smem);
  *warps = int64_t{sms} * (per_sm > 0 ? per_sm : 1) * (l.threads / 32);
  return e;
}

cudaError_t launch_page_read(PageRead how, const uint8_t* pool, int64_t page_bytes, const int32_t* table,
                             int64_t pages, uint32_t* out, int64_t warps, cudaStream_t stream) {
  const Launch l = launch_for(how, page_bytes);
  if (l.kernel == nullptr || warps <= 0 || warps % (l.threads / 32) != 0) return cudaErrorInvalidValue;
  if (const cudaError_t e = allow_smem(l); e != cudaSuccess) return e;
  const void* pool_arg = pool;
  void* args[] = {&pool_arg, &table, &pages, &out};
  const dim3 grid(static_cast<unsigned>(warps / (l.threads / 32)));
  if (const cudaError_t e = cudaLaunchKernel(l.kernel, grid, dim3(l.threads), args, l.smem, stream); e != cudaSuccess)
    return e;
  return cudaGetLastError();
}

}  // namespace fp4::bench::detail
