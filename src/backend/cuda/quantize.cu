// One thread per block of 16 (NVFP4) or 32 (MXFP8) values. A thread moves its whole block with
// 16-byte loads and stores, so a warp covers 1-2 KiB of contiguous input per instruction pair;
// the work per element (a division and a few integer ops) stays under the memory time at
// H200 bandwidth. bench/RESULTS.md has the measured fraction of copy bandwidth.
#include <cuda_bf16.h>

#include "backend/cuda/quantize_launch.h"
#include "formats/mxfp8.h"
#include "formats/nvfp4.h"

namespace fp4::cuda::detail {
namespace {

// Loads N consecutive elements (N*sizeof(T) a multiple of 16, 16-byte aligned) as floats.
template <typename T, int N>
__device__ __forceinline__ void load_floats(const T* src, float* x) {
  static_assert((N * sizeof(T)) % 16 == 0);
  const uint4* v = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int j = 0; j < static_cast<int>(N * sizeof(T) / 16); ++j) {
    const uint4 w = __ldg(v + j);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (sizeof(T) == 4) {
        x[j * 4 + k] = __uint_as_float(words[k]);
      } else {
        x[j * 8 + 2 * k] = bf16_decode(static_cast<uint16_t>(words[k] & 0xFFFFu));
        x[j * 8 + 2 * k + 1] = bf16_decode(static_cast<uint16_t>(words[k] >> 16));
      }
    }
  }
}

template <typename T, int N>
__device__ __forceinline__ void store_floats(T* dst, const float* x) {
  static_assert((N * sizeof(T)) % 16 == 0);
  uint4* v = reinterpret_cast<uint4*>(dst);
#pragma unroll
  for (int j = 0; j < static_cast<int>(N * sizeof(T) / 16); ++j) {
    uint32_t words[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (sizeof(T) == 4) {
        words[k] = __float_as_uint(x[j * 4 + k]);
      } else {
        words[k] = static_cast<uint32_t>(bf16_encode(x[j * 8 + 2 * k])) |
                   (static_cast<uint32_t>(bf16_encode(x[j * 8 + 2 * k + 1])) << 16);
      }
    }
    v[j] = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) nvfp4_quantize_kernel(QuantizeParams p) {
  const int64_t blocks_per_row = p.cols / kNvfp4BlockElems;
  const int64_t total = p.rows * blocks_per_row;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= total) return;
  const int64_t row = b / blocks_per_row, col = (b - row * blocks_per_row) * kNvfp4BlockElems;
  float x[kNvfp4BlockElems];
  load_floats<T, kNvfp4BlockElems>(static_cast<const T*>(p.input) + row * p.input_row_stride + col, x);
  uint8_t packed[kNvfp4BlockCodeBytes];
  p.scales[b] = nvfp4_quantize_block(x, p.global_scale, packed);
  uint2 out;
  out.x = packed[0] | (packed[1] << 8) | (packed[2] << 16) | (static_cast<uint32_t>(packed[3]) << 24);
  out.y = packed[4] | (packed[5] << 8) | (packed[6] << 16) | (static_cast<uint32_t>(packed[7]) << 24);
  reinterpret_cast<uint2*>(p.values)[b] = out;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) nvfp4_dequantize_kernel(DequantizeParams p) {
  const int64_t blocks_per_row = p.cols / kNvfp4BlockElems;
  const int64_t total = p.rows * blocks_per_row;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= total) return;
  const int64_t row = b / blocks_per_row, col = (b - row * blocks_per_row) * kNvfp4BlockElems;
  const uint2 in = __ldg(reinterpret_cast<const uint2*>(p.values) + b);
  const uint8_t packed[kNvfp4BlockCodeBytes] = {
      static_cast<uint8_t>(in.x), static_cast<uint8_t>(in.x >> 8), static_cast<uint8_t>(in.x >> 16),
      static_cast<uint8_t>(in.x >> 24), static_cast<uint8_t>(in.y), static_cast<uint8_t>(in.y >> 8),
      static_cast<uint8_t>(in.y >> 16), static_cast<uint8_t>(in.y >> 24)};
  float x[kNvfp4BlockElems];
  nvfp4_dequantize_block(packed, __ldg(p.scales + b), p.global_scale, x);
  store_floats<T, kNvfp4BlockElems>(static_cast<T*>(p.output) + row * p.output_row_stride + col, x);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) mxfp8_quantize_kernel(QuantizeParams p) {
  const int64_t blocks_per_row = p.cols / kMxfp8BlockElems;
  const int64_t total = p.rows * blocks_per_row;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= total) return;
  const int64_t row = b / blocks_per_row, col = (b - row * blocks_per_row) * kMxfp8BlockElems;
  float x[kMxfp8BlockElems];
  load_floats<T, kMxfp8BlockElems>(static_cast<const T*>(p.input) + row * p.input_row_stride + col, x);
  uint8_t values[kMxfp8BlockElems];
  p.scales[b] = mxfp8_quantize_block(x, values);
  uint4* dst = reinterpret_cast<uint4*>(p.values + b * kMxfp8BlockElems);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint8_t* v = values + j * 16 + k * 4;
      w[k] = v[0] | (v[1] << 8) | (v[2] << 16) | (static_cast<uint32_t>(v[3]) << 24);
    }
    dst[j] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) mxfp8_dequantize_kernel(DequantizeParams p) {
  const int64_t blocks_per_row = p.cols / kMxfp8BlockElems;
  const int64_t total = p.rows * blocks_per_row;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (b >= total) return;
  const int64_t row = b / blocks_per_row, col = (b - row * blocks_per_row) * kMxfp8BlockElems;
  const uint4* src = reinterpret_cast<const uint4*>(p.values + b * kMxfp8BlockElems);
  uint8_t values[kMxfp8BlockElems];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const uint4 w = __ldg(src + j);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 16; ++k) values[j * 16 + k] = static_cast<uint8_t>(words[k / 4] >> (8 * (k % 4)));
  }
  float x[kMxfp8BlockElems];
  mxfp8_dequantize_block(values, __ldg(p.scales + b), x);
  store_floats<T, kMxfp8BlockElems>(static_cast<T*>(p.output) + row * p.output_row_stride + col, x);
}

}  // namespace

cudaError_t launch_quantize(BlockFormat format, const QuantizeParams& p, unsigned grid,
                            cudaStream_t stream) {
  const bool bf16 = p.input_dtype == DType::kBF16;
  if (format == BlockFormat::kNvfp4) {
    if (bf16) nvfp4_quantize_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p);
    else nvfp4_quantize_kernel<float><<<grid, kThreads, 0, stream>>>(p);
  } else {
    if (bf16) mxfp8_quantize_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p);
    else mxfp8_quantize_kernel<float><<<grid, kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

cudaError_t launch_dequantize(BlockFormat format, const DequantizeParams& p, unsigned grid,
                              cudaStream_t stream) {
  const bool bf16 = p.output_dtype == DType::kBF16;
  if (format == BlockFormat::kNvfp4) {
    if (bf16) nvfp4_dequantize_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p);
    else nvfp4_dequantize_kernel<float><<<grid, kThreads, 0, stream>>>(p);
  } else {
    if (bf16) mxfp8_dequantize_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p);
    else mxfp8_dequantize_kernel<float><<<grid, kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
