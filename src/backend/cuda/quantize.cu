// Block quantize/dequantize kernels (docs/kernels/quantize.md has the measured versions).
// The dequantizers and the MXFP8 quantizer give each thread one 16-byte vector of the float
// side (8 bf16 or 4 f32 values), so every warp load or store of that side covers 512
// contiguous bytes; the NVFP4 quantizer, the most arithmetic-heavy, gives each thread a whole
// block so that per-block work is not repeated per lane. Each thread keeps kUnroll vectors of
// loads in flight before any arithmetic, to cover HBM latency. Max is exact in any order, so
// amax reduced across lanes equals the CPU's sequential loop bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/quantize_launch.h"
#include "formats/mxfp8.h"
#include "formats/nvfp4.h"

namespace fp4::cuda::detail {
namespace {

template <BlockFormat F>
constexpr int kBlockElems = F == BlockFormat::kNvfp4 ? kNvfp4BlockElems : kMxfp8BlockElems;

// Bytes of the code side that one vector of V values occupies.
template <BlockFormat F, int V>
constexpr int kCodeBytes = F == BlockFormat::kNvfp4 ? V / 2 : V;

template <int N>
__device__ __forceinline__ uint64_t load_bytes(const uint8_t* p) {
  if constexpr (N == 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    return v.x | (static_cast<uint64_t>(v.y) << 32);
  } else if constexpr (N == 4) {
    return __ldg(reinterpret_cast<const unsigned int*>(p));
  } else {
    static_assert(N == 2);
    return __ldg(reinterpret_cast<const unsigned short*>(p));
  }
}

template <int N>
__device__ __forceinline__ void store_bytes(uint8_t* p, uint64_t v) {
  if constexpr (N == 8) {
    *reinterpret_cast<uint2*>(p) = make_uint2(static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32));
  } else {
    static_assert(N == 4);
    *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(v);
  }
}

template <typename T>
__device__ __forceinline__ void unpack(const uint4& w, float* x) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (sizeof(T) == 4) {
      x[k] = __uint_as_float(words[k]);
    } else {
      x[2 * k] = bf16_decode(static_cast<uint16_t>(words[k] & 0xFFFFu));
      x[2 * k + 1] = bf16_decode(static_cast<uint16_t>(words[k] >> 16));
    }
  }
}

// bf16 output uses the hardware's paired RNE conversion, which gives bf16_encode's bits for
// every non-NaN value and for the canonical NaN that dequantization produces (the kernel tests
// compare every output byte with the CPU's bf16_encode).
template <typename T>
__device__ __forceinline__ uint4 pack(const float* x) {
  uint32_t words[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (sizeof(T) == 4) {
      words[k] = __float_as_uint(x[k]);
    } else {
      const __nv_bfloat162_raw h = __floats2bfloat162_rn(x[2 * k], x[2 * k + 1]);
      words[k] = static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
    }
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// The hardware's paired E4M3 conversion (sm_89+): the bits of e4m3_encode for every float,
// NaN included (tests/kernels/e4m3_hardware_test.cu checks all 2^32 inputs on the device).
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ uint8_t e4m3(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float max_propagating_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// E2M1 codes of 8 values on the E2M1 grid, given times 2^-6, packed low nibble first. A grid
// value times 2^-6 is an exact E4M3 number whose byte is sign<<7 | code<<2 (the E2M1-to-E4M3
// bit placement), so the hardware's paired conversion does the encoding and a few integer
// operations per four values gather the nibbles.
__device__ __forceinline__ uint32_t e2m1_codes8(const float* grid_div64) {
  uint32_t words[2];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const uint32_t lo = e4m3x2(grid_div64[4 * w], grid_div64[4 * w + 1]);
    const uint32_t hi = e4m3x2(grid_div64[4 * w + 2], grid_div64[4 * w + 3]);
    const uint32_t bytes = lo | (hi << 16);
    const uint32_t nibbles = ((bytes >> 2) & 0x07070707u) | ((bytes >> 4) & 0x08080808u);
    words[w] = nibbles | (nibbles >> 4);  // bytes 0 and 2 now hold two codes each
  }
  return __byte_perm(words[0], words[1], 0x6420);
}

// Element offset of vector v in a row-major matrix with `vectors_per_row` vectors of V per row.
// The branches are uniform across the grid; the 64-bit division (a long software sequence)
// only runs for strided matrices of more than 2^32 vectors.
template <int V>
__device__ __forceinline__ int64_t strided_offset(int64_t v, int64_t vectors_per_row, int64_t row_stride,
                                                  bool dense) {
  if (dense) return v * V;
  const int64_t row = v < (int64_t{1} << 32) ? static_cast<uint32_t>(v) / static_cast<uint32_t>(vectors_per_row)
                                             : v / vectors_per_row;
  return row * row_stride + (v - row * vectors_per_row) * V;
}

// NVFP4: one thread per quantization block of 16 values (two bf16 vectors or four f32 ones,
// contiguous in memory), so the per-block work (scale, divisor, reciprocal) is done once per 16
// values rather than once per lane. A warp's loads cover 1-2 KiB with every byte used by one
// of the thread's consecutive loads; the codes go out as 8 bytes per thread.
template <typename T>
__global__ void __launch_bounds__(kThreads) nvfp4_quantize_kernel(QuantizeParams p) {
  constexpr int V = 16 / sizeof(T);
  constexpr int kVectors = kNvfp4BlockElems / V;
  constexpr int kBlocksPerThread = kUnroll / kVectors;  // kUnroll vectors in flight per thread
  // grid_size() counts kUnroll vectors per thread; that is whole blocks only if this holds.
  static_assert(kUnroll % kVectors == 0 && kBlocksPerThread >= 1);
  const int64_t blocks_per_row = p.cols / kNvfp4BlockElems;
  const int64_t total = p.rows * blocks_per_row;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kBlocksPerThread + threadIdx.x;
  const T* input = static_cast<const T*>(p.input);
  const bool dense = p.input_row_stride == p.cols;

  uint4 raw[kBlocksPerThread][kVectors];
#pragma unroll
  for (int k = 0; k < kBlocksPerThread; ++k) {
    const int64_t b = first + k * kThreads;
    const uint4* src = reinterpret_cast<const uint4*>(
        input + strided_offset<kNvfp4BlockElems>(b, blocks_per_row, p.input_row_stride, dense));
#pragma unroll
    for (int j = 0; j < kVectors; ++j) raw[k][j] = b < total ? __ldg(src + j) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int k = 0; k < kBlocksPerThread; ++k) {
    const int64_t b = first + k * kThreads;
    float x[kNvfp4BlockElems];
#pragma unroll
    for (int j = 0; j < kVectors; ++j) unpack<T>(raw[k][j], x + j * V);
    // max.NaN propagates NaN, so one instruction per value both finds amax and flags a NaN;
    // without a NaN the result equals accumulate_amax's exactly.
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kNvfp4BlockElems; ++i) amax = max_propagating_nan(amax, fabsf(x[i]));
    // nvfp4_scale_code, with the hardware E4M3 conversion.
    const uint8_t scale = is_nan(amax) ? kE4M3NaN : e4m3(nvfp4_scale_input(amax, p.global_scale));
    const float divisor = nvfp4_value_divisor(scale, p.global_scale);
    uint32_t codes[2] = {0, 0};
    // 1 / (64 d) is exactly 2^-6 / d here, so the rounding lands on the grid times 2^-6.
    const float divisor64 = divisor * 64.0f;
    if (nvfp4_fast_divisor(divisor64)) {
      const float reciprocal64 = 1.0f / divisor64;
      float grid_div64[kNvfp4BlockElems];
#pragma unroll
      for (int i = 0; i < kNvfp4BlockElems; ++i) grid_div64[i] = nvfp4_round_to_grid<-6>(x[i], reciprocal64);
      codes[0] = e2m1_codes8(grid_div64);
      codes[1] = e2m1_codes8(grid_div64 + 8);
    } else {
#pragma unroll
      for (int i = 0; i < kNvfp4BlockElems; ++i)
        codes[i / 8] |= static_cast<uint32_t>(nvfp4_encode_value(x[i], nvfp4_value_reciprocal(divisor))) << (4 * (i % 8));
    }
    if (b < total) {
      *reinterpret_cast<uint2*>(p.values + b * kNvfp4BlockCodeBytes) = make_uint2(codes[0], codes[1]);
      p.scales[b] = scale;
    }
  }
}

// MXFP8: one 16-byte vector per thread (coalesced); the 2-8 lanes of a block of 32 combine
// their amax with shuffles, and the hardware converts pairs to E4M3.
template <typename T>
__global__ void __launch_bounds__(kThreads) mxfp8_quantize_kernel(QuantizeParams p) {
  constexpr int V = 16 / sizeof(T);
  constexpr int kLanesPerBlock = kMxfp8BlockElems / V;
  const int64_t vectors_per_row = p.cols / V;
  const int64_t total = p.rows * vectors_per_row;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  const T* input = static_cast<const T*>(p.input);
  const bool dense = p.input_row_stride == p.cols;

  uint4 raw[kUnroll];
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int64_t v = first + k * kThreads;
    raw[k] = v < total ? __ldg(reinterpret_cast<const uint4*>(input + strided_offset<V>(v, vectors_per_row, p.input_row_stride, dense)))
                       : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int64_t v = first + k * kThreads;
    float x[V];
    unpack<T>(raw[k], x);
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) amax = max_propagating_nan(amax, fabsf(x[i]));
    // Lanes of one block are kLanesPerBlock consecutive, aligned lanes (rows hold whole
    // blocks), and every lane of the warp takes part, active or not.
#pragma unroll
    for (int offset = 1; offset < kLanesPerBlock; offset <<= 1)
      amax = max_propagating_nan(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
    const uint8_t scale = mxfp8_scale_code(amax, is_nan(amax));
    const float inverse = ue8m0_inverse(scale);  // mxfp8_encode_value, two at a time
    uint64_t codes = 0;
#pragma unroll
    for (int i = 0; i < V; i += 2) codes |= static_cast<uint64_t>(e4m3x2(x[i] * inverse, x[i + 1] * inverse)) << (8 * i);
    if (v < total) {
      store_bytes<V>(p.values + v * V, codes);
      if (threadIdx.x % kLanesPerBlock == 0) p.scales[v / kLanesPerBlock] = scale;
    }
  }
}

template <typename T, BlockFormat F>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(DequantizeParams p) {
  constexpr int V = 16 / sizeof(T);
  constexpr int kLanesPerBlock = kBlockElems<F> / V;
  constexpr int kBytes = kCodeBytes<F, V>;
  const int64_t vectors_per_row = p.cols / V;
  const int64_t total = p.rows * vectors_per_row;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
  const bool dense = p.output_row_stride == p.cols;

  uint64_t codes[kUnroll];
  uint8_t scales[kUnroll];
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int64_t v = first + k * kThreads;
    codes[k] = v < total ? load_bytes<kBytes>(p.values + v * kBytes) : 0;
    scales[k] = v < total ? __ldg(p.scales + v / kLanesPerBlock) : 0;
  }
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int64_t v = first + k * kThreads;
    if (v >= total) break;
    float x[V];
    if constexpr (F == BlockFormat::kNvfp4) {
      const float sf = e4m3_decode(scales[k]);
#pragma unroll
      for (int i = 0; i < V; ++i) x[i] = nvfp4_decode_value((codes[k] >> (4 * i)) & 0xFu, sf, p.global_scale);
    } else {
      const float s = ue8m0_decode(scales[k]);
#pragma unroll
      for (int i = 0; i < V; ++i) x[i] = mxfp8_decode_value(static_cast<uint8_t>(codes[k] >> (8 * i)), s);
    }
    T* out = static_cast<T*>(p.output) + strided_offset<V>(v, vectors_per_row, p.output_row_stride, dense);
    *reinterpret_cast<uint4*>(out) = pack<T>(x);
  }
}

template <typename T>
void launch_quantize_as(BlockFormat format, const QuantizeParams& p, unsigned grid, cudaStream_t s) {
  if (format == BlockFormat::kNvfp4) nvfp4_quantize_kernel<T><<<grid, kThreads, 0, s>>>(p);
  else mxfp8_quantize_kernel<T><<<grid, kThreads, 0, s>>>(p);
}

template <typename T>
void launch_dequantize_as(BlockFormat format, const DequantizeParams& p, unsigned grid, cudaStream_t s) {
  if (format == BlockFormat::kNvfp4) dequantize_kernel<T, BlockFormat::kNvfp4><<<grid, kThreads, 0, s>>>(p);
  else dequantize_kernel<T, BlockFormat::kMxfp8><<<grid, kThreads, 0, s>>>(p);
}

}  // namespace

cudaError_t launch_quantize(BlockFormat format, const QuantizeParams& p, unsigned grid, cudaStream_t stream) {
  if (p.input_dtype == DType::kBF16) launch_quantize_as<__nv_bfloat16>(format, p, grid, stream);
  else launch_quantize_as<float>(format, p, grid, stream);
  return cudaGetLastError();
}

cudaError_t launch_dequantize(BlockFormat format, const DequantizeParams& p, unsigned grid, cudaStream_t stream) {
  if (p.output_dtype == DType::kBF16) launch_dequantize_as<__nv_bfloat16>(format, p, grid, stream);
  else launch_dequantize_as<float>(format, p, grid, stream);
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
