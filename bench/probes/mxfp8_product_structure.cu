// Probe of the MXFP8 product's memory structure, piece by piece, without its real arithmetic
// (bench/RESULTS.md, 2026-12-07, "where the MXFP8 product's time goes"):
//   nvcc -O2 -std=c++17 -arch=sm_90a -o /tmp/product_structure bench/probes/mxfp8_product_structure.cu && /tmp/product_structure
// Per group a warp copies 32 feature rows x 128 B of codes (cp.async 16 B), optionally the 32
// features' 4 scale bytes (cp.async 4 B, .ca), optionally the CTA copies 8 KB of x from a
// small L2-resident buffer; optionally kMma fake MMAs a warp a group. One barrier a group.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void wait0() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <bool kScales, bool kX, int kMmaBlocks>
__global__ void __launch_bounds__(128, 4) probe(const uint8_t* w, const uint8_t* sc, const uint8_t* x, int64_t n, int64_t k, int tiles,
                                             int per_split, uint32_t* out) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile = blockIdx.x % tiles, split = blockIdx.x / tiles;
  const int64_t groups = k / 128;
  const int64_t g0 = int64_t(split) * per_split, g1 = min(g0 + per_split, groups);
  uint8_t* ring = smem + warp * 2 * 4224;
  uint8_t* xring = smem + 4 * 2 * 4224;
  const uint8_t* codes = w + (int64_t(tile) * 128 + warp * 32 + lane / 8) * k + (lane % 8) * 16;
  const uint8_t* scales = sc + (int64_t(tile) * 128 + warp * 32 + lane) * (k / 32);
  auto fill = [&](int slot, int64_t g) {
    if (g < g1) {
#pragma unroll
      for (int i = 0; i < 8; ++i) cp16(ring + slot * 4224 + (i * 32 + lane) * 16, codes + i * 4 * k + g * 128);
      if (kScales) cp4(ring + slot * 4224 + 4096 + lane * 4, scales + g * 4);
      if (kX) {
#pragma unroll
        for (int i = 0; i < 4; ++i) cp16(xring + slot * 8192 + (i * 128 + threadIdx.x) * 16, x + (g % 32) * 8192 + (i * 128 + threadIdx.x) * 16);
      }
    }
    commit();
  };
  fill(0, g0);
  float acc[4][4] = {};
  uint32_t bits = 0;
  int slot = 1;
  for (int64_t g = g0; g < g1; ++g) {
    wait0();
    __syncthreads();
    fill(slot, g + 1);
    slot ^= 1;
    const uint8_t* s = ring + slot * 4224;
#pragma unroll 1
    for (int b = 0; b < kMmaBlocks; ++b) {
      const uint4 a0 = *reinterpret_cast<const uint4*>(xring + slot * 8192 + b * 1024 + lane * 16);
      const uint4 a1 = *reinterpret_cast<const uint4*>(xring + slot * 8192 + 4096 + b * 1024 + lane * 16);
      const uint32_t s0[4] = {a0.x, a0.y, a0.z, a0.w}, s1[4] = {a1.x, a1.y, a1.z, a1.w};
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const uint2 c = *reinterpret_cast<const uint2*>(s + (nt * 8 + lane / 4) * 128 + b * 32 + (lane % 4) * 8);
        mma(acc[nt], s0, c.x, c.y);
        mma(acc[nt], s1, c.x, c.y);
        mma(acc[nt], s0, c.y, c.x);
        mma(acc[nt], s1, c.y, c.x);
      }
    }
    bits ^= reinterpret_cast<const uint32_t*>(s)[lane];
  }
  float sum = 0;
  for (int i = 0; i < 4; ++i) for (int j = 0; j < 4; ++j) sum += acc[i][j];
  if (bits == 0x12345678u || sum == 1234.5f) out[blockIdx.x] = bits;
}

template <bool kScales, bool kX, int kMmaBlocks>
void run(const uint8_t* w, const uint8_t* sc, const uint8_t* x, int64_t n, int64_t k, int sms, uint32_t* out, const char* name) {
  const int tiles = int(n / 128);
  const int64_t groups = k / 128;
  const int64_t wanted = std::max<int64_t>(1, (int64_t(4) * sms + tiles - 1) / tiles);
  const int per_split = int((groups + wanted - 1) / wanted);
  const int splits = int((groups + per_split - 1) / per_split);
  const int smem = 4 * 2 * 4224 + 2 * 8192;
  cudaFuncSetAttribute(probe<kScales, kX, kMmaBlocks>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaEvent_t a, b;
  cudaEventCreate(&a); cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) probe<kScales, kX, kMmaBlocks><<<tiles * splits, 128, smem>>>(w, sc, x, n, k, tiles, per_split, out);
  const int reps = 20;
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    probe<kScales, kX, kMmaBlocks><<<tiles * splits, 128, smem>>>(w, sc, x, n, k, tiles, per_split, out);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    cudaEventElapsedTime(&ms[i], a, b);
  }
  std::sort(ms.begin(), ms.end());
  const float med = ms[reps / 2];
  printf("%-40s grid %5d: %8.1f us  %7.1f GB/s (codes)  err %s\n", name, tiles * splits, med * 1e3,
         double(n) * k / (med * 1e-3) / 1e9, cudaGetErrorString(cudaGetLastError()));
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int64_t n = 8192, k = 6144;
  uint8_t *w, *sc, *x;
  uint32_t* out;
  cudaMalloc(&w, size_t(n) * k);
  cudaMalloc(&sc, size_t(n) * k / 32);
  cudaMalloc(&x, 32 * 8192);
  cudaMalloc(&out, 1 << 20);
  cudaMemset(w, 0x11, size_t(n) * k);
  cudaMemset(sc, 0x7f, size_t(n) * k / 32);
  cudaMemset(x, 0x11, 32 * 8192);
  run<false, false, 0>(w, sc, x, n, k, sms, out, "codes");
  run<true, false, 0>(w, sc, x, n, k, sms, out, "codes + scales");
  run<false, true, 0>(w, sc, x, n, k, sms, out, "codes + x");
  run<true, true, 0>(w, sc, x, n, k, sms, out, "codes + scales + x");
  run<true, true, 4>(w, sc, x, n, k, sms, out, "all + 64 mma a group a warp");
  run<false, false, 4>(w, sc, x, n, k, sms, out, "codes + 64 mma");
  run<true, true, 2>(w, sc, x, n, k, sms, out, "all + 32 mma");
  return 0;
}
