// Shared by the host compiler and nvcc: FP4_HD marks functions that must compile, and compute
// the same bits, on both sides. Nothing here may depend on fast-math or FMA contraction.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FP4_HD __host__ __device__ __forceinline__
#else
#define FP4_HD inline
#endif

namespace fp4 {

FP4_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

FP4_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// 2^e as an exact float, for e in [-149, 127] (normal and subnormal powers of two).
FP4_HD float exp2_exact(int e) {
  return e >= -126 ? bits_to_float(static_cast<uint32_t>(e + 127) << 23)
                   : bits_to_float(1u << (e + 149));
}

FP4_HD float quiet_nan() { return bits_to_float(0x7FC00000u); }
FP4_HD bool is_nan(float x) { return (float_to_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }

}  // namespace fp4
