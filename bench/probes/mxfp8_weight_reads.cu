// Probe of the MXFP8 product's weight reads without its arithmetic (bench/RESULTS.md, 2026-12-07,
// "where the MXFP8 product's time goes"): q's 8192 x 6144 codes read the way
// src/backend/cuda/mxfp8_linear.cu reads them, and in other ways, each timed alone.
//   nvcc -O2 -std=c++17 -arch=sm_90a -o /tmp/weight_reads bench/probes/mxfp8_weight_reads.cu && /tmp/weight_reads
// Grid: tiles x splits CTAs of 4 warps; each warp copies, per group, 32 rows x 128 B (4 KB)
// by cp.async into its own ring slot, a group ahead (kSlots - 1 in flight), one CTA barrier a
// group. Layouts: strided (row-major [n][k]: rows k bytes apart) or tiled ([tile][group]
// [128 rows][128 B]: a warp's group is 4 KB in a row). The last rows read by 16-byte loads into
// registers instead (no shared memory, no barrier).
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait_group() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

template <bool kTiled, int kSlots, int kRowBytes>
__global__ void __launch_bounds__(128) probe(const uint8_t* w, int64_t n, int64_t k, int tiles, int per_split, uint32_t* out) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile = blockIdx.x % tiles, split = blockIdx.x / tiles;
  const int64_t groups = k / kRowBytes;
  const int64_t g0 = int64_t(split) * per_split, g1 = min(g0 + per_split, groups);
  uint8_t* ring = smem + warp * kSlots * 4096;
  constexpr int kChunksPerRow = kRowBytes / 16, kRows = 4096 / kRowBytes;
  auto fill = [&](int slot, int64_t g) {
    if (g < g1) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int c = i * 32 + lane, r = c / kChunksPerRow, ch = c % kChunksPerRow;
        const int64_t feature = int64_t(tile) * (4 * kRows) + warp * kRows + r;
        const uint8_t* src;
        if (kTiled) {
          src = w + ((int64_t(tile) * groups + g) * (4 * kRows) + warp * kRows + r) * kRowBytes + ch * 16;
        } else {
          src = w + feature * k + g * kRowBytes + ch * 16;
        }
        cp16(ring + slot * 4096 + c * 16, src);
      }
    }
    commit();
  };
  for (int i = 0; i < kSlots - 1; ++i) fill(i, g0 + i);
  uint32_t acc = 0;
  int slot = kSlots - 1;
  for (int64_t g = g0; g < g1; ++g) {
    wait_group<kSlots - 2>();
    __syncthreads();
    fill(slot, g + kSlots - 1);
    slot = slot == kSlots - 1 ? 0 : slot + 1;
    acc ^= reinterpret_cast<const uint32_t*>(ring + slot * 4096)[threadIdx.x % 32 + 32 * (g % 32)];
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

// The product's split of k (about ctas_per_sm CTAs an SM) for CTAs of rows_per_cta rows.
struct Split {
  int tiles, per_split, splits;
};
Split split_of(int64_t n, int64_t k, int row_bytes, int rows_per_cta, int ctas_per_sm, int sms) {
  const int tiles = int(n / rows_per_cta);
  const int64_t groups = k / row_bytes;
  const int64_t wanted = std::max<int64_t>(1, (int64_t(ctas_per_sm) * sms + tiles - 1) / tiles);
  const int per_split = int((groups + wanted - 1) / wanted);
  return {tiles, per_split, int((groups + per_split - 1) / per_split)};
}

// Median of 20 timed launches after 3 untimed ones; prints a row.
template <typename Launch>
void time_and_print(Launch launch, const Split& s, int64_t n, int64_t k, const char* name) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) launch();
  const int reps = 20;
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms[i], a, b);
  }
  std::sort(ms.begin(), ms.end());
  const float med = ms[reps / 2];
  printf("%-44s n %6lld k %6lld grid %5d (per_split %d): %8.1f us  %7.1f GB/s  err %s\n", name, (long long)n, (long long)k,
         s.tiles * s.splits, s.per_split, med * 1e3, double(n) * k / (med * 1e-3) / 1e9, cudaGetErrorString(cudaGetLastError()));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

template <bool kTiled, int kSlots, int kRowBytes>
void run(const uint8_t* w, int64_t n, int64_t k, int ctas_per_sm, int sms, uint32_t* out, const char* name) {
  const Split s = split_of(n, k, kRowBytes, 4 * (4096 / kRowBytes), ctas_per_sm, sms);
  const int smem = 4 * kSlots * 4096;
  cudaFuncSetAttribute(probe<kTiled, kSlots, kRowBytes>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  time_and_print([&] { probe<kTiled, kSlots, kRowBytes><<<s.tiles * s.splits, 128, smem>>>(w, n, k, s.tiles, s.per_split, out); },
                 s, n, k, name);
}

// The same bytes by 16-byte loads straight into registers (no shared memory, no barrier),
// kAhead groups in flight a warp.
template <int kAhead>
__global__ void __launch_bounds__(128) probe_ldg(const uint8_t* w, int64_t n, int64_t k, int tiles, int per_split, uint32_t* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile = blockIdx.x % tiles, split = blockIdx.x / tiles;
  const int64_t groups = k / 128;
  const int64_t g0 = int64_t(split) * per_split, g1 = min(g0 + per_split, groups);
  const uint8_t* base = w + (int64_t(tile) * 128 + warp * 32 + lane / 8) * k + (lane % 8) * 16;
  uint4 buf[kAhead][8];
  auto load = [&](uint4 (&b)[8], int64_t g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (g < g1) {
        const uint8_t* src = base + i * 4 * k + g * 128;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(b[i].x), "=r"(b[i].y), "=r"(b[i].z), "=r"(b[i].w) : "l"(src));
      } else {
        b[i] = make_uint4(0, 0, 0, 0);
      }
    }
  };
#pragma unroll
  for (int a = 0; a < kAhead; ++a) load(buf[a], g0 + a);
  uint32_t acc = 0;
  for (int64_t g = g0; g < g1; g += kAhead) {
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc ^= buf[a][i].x ^ buf[a][i].y ^ buf[a][i].z ^ buf[a][i].w;
      load(buf[a], g + a + kAhead);
    }
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}

template <int kAhead>
void run_ldg(const uint8_t* w, int64_t n, int64_t k, int ctas_per_sm, int sms, uint32_t* out, const char* name) {
  const Split s = split_of(n, k, 128, 128, ctas_per_sm, sms);
  time_and_print([&] { probe_ldg<kAhead><<<s.tiles * s.splits, 128>>>(w, n, k, s.tiles, s.per_split, out); }, s, n, k, name);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int64_t n = 8192, k = 6144;
  uint8_t* w = nullptr;
  uint32_t* out = nullptr;
  cudaMalloc(&w, size_t(n) * k * 4);  // room to rotate so L2 holds nothing useful
  cudaMalloc(&out, 1 << 20);
  cudaMemset(w, 1, size_t(n) * k * 4);
  // copy ceiling
  uint8_t* dst = nullptr;
  cudaMalloc(&dst, size_t(n) * k);
  cudaEvent_t a, b;
  cudaEventCreate(&a); cudaEventCreate(&b);
  float best = 1e9;
  for (int i = 0; i < 10; ++i) {
    cudaEventRecord(a);
    cudaMemcpy(dst, w + size_t(n) * k * 2, size_t(n) * k, cudaMemcpyDeviceToDevice);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b);
    best = std::min(best, ms);
  }
  printf("copy %lld MB: %.1f us, %.1f GB/s (read+write)\n", (long long)(n * k >> 20), best * 1e3, 2.0 * n * k / (best * 1e-3) / 1e9);
  run<false, 2, 128>(w, n, k, 4, sms, out, "strided 128 B rows, 2 slots, 4 CTA/SM");
  run<true, 2, 128>(w, n, k, 4, sms, out, "tiled 4 KB groups, 2 slots, 4 CTA/SM");
  run<false, 3, 128>(w, n, k, 4, sms, out, "strided 128 B rows, 3 slots, 4 CTA/SM");
  run<true, 3, 128>(w, n, k, 4, sms, out, "tiled, 3 slots, 4 CTA/SM");
  run<false, 2, 512>(w, n, k, 4, sms, out, "strided 512 B rows (8 rows/warp), 2 slots");
  run<false, 2, 256>(w, n, k, 4, sms, out, "strided 256 B rows (16 rows/warp), 2 slots");
  run<false, 2, 128>(w, n, k, 1, sms, out, "strided 128 B rows, 2 slots, 1 CTA/SM split");
  run<false, 2, 128>(w, n, k, 16, sms, out, "strided 128 B rows, 2 slots, 16 CTA/SM split");
  run<true, 2, 128>(w, n, k, 16, sms, out, "tiled, 2 slots, 16 CTA/SM split");
  run_ldg<1>(w, n, k, 4, sms, out, "ldg to registers, 1 group ahead, 4 CTA/SM");
  run_ldg<2>(w, n, k, 4, sms, out, "ldg to registers, 2 groups ahead, 4 CTA/SM");
  run_ldg<2>(w, n, k, 8, sms, out, "ldg to registers, 2 groups ahead, 8 CTA/SM");
  run_ldg<1>(w, n, k, 16, sms, out, "ldg to registers, 1 group ahead, 16 CTA/SM");
  return 0;
}
