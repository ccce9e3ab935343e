// Loads of data that a kernel reads once (the weights of the decode-sized projections and
// experts): from the read-only path straight to registers, not kept in L1, so that L1 is left to
// what is read again (the activations).
#pragma once

#include <cuda_runtime.h>

namespace fp4::cuda::detail {

__device__ __forceinline__ uint4 load_streaming16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint2 load_streaming8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// One byte, zero-extended.
__device__ __forceinline__ uint32_t load_streaming1(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u8 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ unsigned short load_streaming2(const void* p) {
  unsigned short v;
  asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

}  // namespace fp4::cuda::detail
