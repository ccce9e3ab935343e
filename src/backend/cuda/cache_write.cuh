// Device-side cache writers shared by the cache-insert and pre-attention kernels. One call
// encodes one 16-value block of one (token, plane, group) row with the codecs
// kvcache::write_token uses, so the bytes are the CPU's by construction: bf16_encode (every NaN
// handled as the reference does), FP8 as an IEEE division by the scale then the hardware E4M3
// conversion (equal to e4m3_encode on all 2^32 floats, tests/kernels/e4m3_hardware_test.cu),
// NVFP4 through nvfp4_quantize_block itself.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/cache_insert.h"
#include "formats/minifloat.h"
#include "formats/nvfp4.h"

namespace fp4::cuda::detail::cache_write {

using kvcache::PageDType;

constexpr int kBlock = kNvfp4BlockElems;

__device__ __forceinline__ bool aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The 16 values of a block in global memory, through the read-only path.
__device__ __forceinline__ void load16(const float* src, float* x) {
  if (aligned(src, 16)) {
#pragma unroll
    for (int k = 0; k < kBlock / 4; ++k) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(src) + k);
      x[4 * k] = v.x;
      x[4 * k + 1] = v.y;
      x[4 * k + 2] = v.z;
      x[4 * k + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kBlock; ++i) x[i] = __ldg(src + i);
  }
}

// Stores kWords little-endian 32-bit words: 16-byte vectors when the address allows (every
// layout of page_layout.h with 128-token pages does), bytes otherwise.
template <int kWords>
__device__ __forceinline__ void store_words(uint8_t* dst, const uint32_t* w) {
  if constexpr (kWords % 4 == 0) {
    if (aligned(dst, 16)) {
#pragma unroll
      for (int k = 0; k < kWords / 4; ++k)
        reinterpret_cast<uint4*>(dst)[k] = make_uint4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
      return;
    }
  } else {
    static_assert(kWords == 2);
    if (aligned(dst, 8)) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < 4 * kWords; ++i) dst[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
}

// Bytes of the codes of `values` values (page_layout.h's page_code_bytes).
__device__ __forceinline__ int64_t code_bytes(PageDType dtype, int64_t values) {
  switch (dtype) {
    case PageDType::kFP32: return 4 * values;
    case PageDType::kBF16: return 2 * values;
    case PageDType::kFP8: return values;
    case PageDType::kNVFP4: return values / 2;
  }
  return 0;
}

__device__ __forceinline__ uint8_t e4m3(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ uint32_t e4m3x4(const float* x, float scale) {
  uint32_t w = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) w |= static_cast<uint32_t>(e4m3(__fdiv_rn(x[i], scale))) << (8 * i);
  return w;
}

// A whole 16-value block: codes at `codes`, the NVFP4 scale at `scale_byte`.
__device__ __forceinline__ void write_block(PageDType dtype, const float (&x)[kBlock], float scale,
                                            uint8_t* codes, uint8_t* scale_byte) {
  switch (dtype) {
    case PageDType::kFP32: {
      uint32_t w[kBlock];
#pragma unroll
      for (int i = 0; i < kBlock; ++i) w[i] = __float_as_uint(x[i]);
      store_words<kBlock>(codes, w);
      break;
    }
    case PageDType::kBF16: {
      uint32_t w[kBlock / 2];
#pragma unroll
      for (int i = 0; i < kBlock / 2; ++i)
        w[i] = bf16_encode(x[2 * i]) | (static_cast<uint32_t>(bf16_encode(x[2 * i + 1])) << 16);
      store_words<kBlock / 2>(codes, w);
      break;
    }
    case PageDType::kFP8: {
      uint32_t w[kBlock / 4];
#pragma unroll
      for (int i = 0; i < kBlock / 4; ++i) w[i] = e4m3x4(x + 4 * i, scale);
      store_words<kBlock / 4>(codes, w);
      break;
    }
    case PageDType::kNVFP4: {
      uint8_t packed[kNvfp4BlockCodeBytes];
      *scale_byte = nvfp4_quantize_block(x, scale, packed);
      uint32_t w[2] = {0, 0};
#pragma unroll
      for (int i = 0; i < kNvfp4BlockCodeBytes; ++i) w[i / 4] |= static_cast<uint32_t>(packed[i]) << (8 * (i % 4));
      store_words<2>(codes, w);
      break;
    }
  }
}

// The short last block of a group whose length is not a multiple of 16 (FP32, BF16 and FP8
// layouts of tiny heads; NVFP4 layouts have none), value by value.
__device__ inline void write_partial(PageDType dtype, const float* src, int n, float scale, uint8_t* codes) {
  for (int i = 0; i < n; ++i) {
    const float x = src[i];
    if (dtype == PageDType::kFP32) {
      const uint32_t u = __float_as_uint(x);
      for (int b = 0; b < 4; ++b) codes[4 * i + b] = static_cast<uint8_t>(u >> (8 * b));
    } else if (dtype == PageDType::kBF16) {
      const uint16_t h = bf16_encode(x);
      codes[2 * i] = static_cast<uint8_t>(h);
      codes[2 * i + 1] = static_cast<uint8_t>(h >> 8);
    } else {
      codes[i] = e4m3(__fdiv_rn(x, scale));
    }
  }
}

// Writes block `chunk` of group `g`, plane `plane` (0: K, 1: V) of the token in `slot`, whose
// values start at `src`: global memory (read-only path) when kGlobalSource, shared otherwise.
// A slot outside the pool (negative included) is skipped: the device cannot throw.
template <bool kGlobalSource>
__device__ __forceinline__ void write_cache_block(const CacheTarget& c, int64_t slot, int plane, int g, int chunk,
                                                  const float* src) {
  if (slot < 0 || slot >= c.num_pages * c.page_tokens) return;
  const int64_t page = slot / c.page_tokens;
  const int64_t row = int64_t{g} * c.page_tokens + slot % c.page_tokens;
  uint8_t* base = c.pool + page * c.page_bytes;
  const int first = chunk * kBlock;
  uint8_t* codes = base + c.codes_offset[plane] + row * c.code_row_bytes + code_bytes(c.dtype, first);
  const int n = c.group_elems - first < kBlock ? c.group_elems - first : kBlock;
  if (n < kBlock) {
    write_partial(c.dtype, src, n, c.scale[plane], codes);
    return;
  }
  float x[kBlock];
  if constexpr (kGlobalSource) {
    load16(src, x);
  } else {
#pragma unroll
    for (int i = 0; i < kBlock; ++i) x[i] = src[i];
  }
  write_block(c.dtype, x, c.scale[plane], codes, base + c.scales_offset[plane] + row * c.scale_row_bytes + chunk);
}

}  // namespace fp4::cuda::detail::cache_write
