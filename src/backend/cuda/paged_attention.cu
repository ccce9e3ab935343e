// Paged attention, CUDA-core kernel (every page format; the only one for FP32 pages), the
// split merge and the dispatch. The tensor-core kernel is paged_attention_mma.cu; the design,
// bytes and numerics: docs/kernels/attention_decode.md.
//
// One CTA of 4 warps per (token, KV head, split). The group's query heads (padded to GP rows of
// zeros) sit in shared memory; each warp owns GP/4 of them. A 128-token block is walked in
// chunks of 32 keys: the CTA stages the chunk's K and V rows dequantized to FP32 (the bits of
// kvcache::read_page), then each warp scores its heads with lane = key, runs the base-2 online
// softmax with warp shuffles, and accumulates P.V with lane = 4 (or 2, 1) output dims.
#include <cuda_runtime.h>

#include "backend/cuda/dependent_launch.cuh"
#include "backend/cuda/paged_attention_device.cuh"
#include "backend/cuda/paged_attention_launch.h"
#include "formats/attention_operands.h"
#include "formats/minifloat.h"
#include "formats/nvfp4.h"

namespace fp4::cuda::detail {
namespace {

constexpr int kThreads = kAttentionThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 32;  // keys staged at a time: one per lane when scoring

template <KvFormat F>
constexpr int kBits = F == KvFormat::kF32 ? 32 : F == KvFormat::kBF16 ? 16 : F == KvFormat::kFP8 ? 8 : 4;

// One (group, token) row of a region: D values in kRowBytes, read as 16-byte vectors of kElems.
template <KvFormat F, int D>
struct Rows {
  static constexpr int kRowBytes = D * kBits<F> / 8;
  static constexpr int kVecsPerRow = kRowBytes / 16;
  static constexpr int kElems = 128 / kBits<F>;
  static constexpr int kVecs = kChunk * kVecsPerRow;  // per chunk
  static constexpr int kPerThread = (kVecs + kThreads - 1) / kThreads;
  static_assert(kVecsPerRow >= 1 && kRowBytes % 16 == 0, "rows are whole 16-byte vectors");
};

// A chunk's raw vectors of one region (K or V) held by this thread; an NVFP4 vector (32 values,
// two blocks) carries its two scale bytes.
template <KvFormat F, int D>
struct RawChunk {
  uint4 v[Rows<F, D>::kPerThread];
  uint32_t scales[Rows<F, D>::kPerThread];
};

// Vector i of the chunk is piece i % kVecsPerRow of key i / kVecsPerRow, so a warp reads whole
// rows, contiguous in the page (head-major pages; flattened ones step over the other heads). Keys at or past `valid` are not read and stay zero.
template <KvFormat F, int D>
__device__ __forceinline__ void load_chunk(RawChunk<F, D>& r, const uint8_t* page, int64_t codes,
                                           int64_t scales, int row0, int key_step, int valid) {
  using R = Rows<F, D>;
#pragma unroll
  for (int j = 0; j < R::kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    const int key = i / R::kVecsPerRow, piece = i % R::kVecsPerRow;
    r.v[j] = make_uint4(0, 0, 0, 0);
    r.scales[j] = 0;
    if (i < R::kVecs && key < valid) {
      const int64_t row = row0 + (key_step == 1 ? key : key * key_step);
      r.v[j] = __ldg(reinterpret_cast<const uint4*>(page + codes + row * R::kRowBytes) + piece);
      if constexpr (F == KvFormat::kNVFP4) {
        constexpr int kScaleRowBytes = D / kNvfp4BlockElems;
        r.scales[j] = __ldg(reinterpret_cast<const unsigned short*>(
                                page + scales + row * kScaleRowBytes) + piece);
      }
    }
  }
}

// The values of one 16-byte vector exactly as kvcache::read_page computes them (same codec
// functions, same operation order); an all-zero vector decodes to zeros in every format.
template <KvFormat F>
__device__ __forceinline__ void decode(const uint4& raw, uint32_t scales, float scale, float* x) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (F == KvFormat::kF32) {
      x[i] = __uint_as_float(w[i]);
    } else if constexpr (F == KvFormat::kBF16) {
      x[2 * i] = bf16_decode(static_cast<uint16_t>(w[i] & 0xFFFFu));
      x[2 * i + 1] = bf16_decode(static_cast<uint16_t>(w[i] >> 16));
    } else if constexpr (F == KvFormat::kFP8) {
#pragma unroll
      for (int b = 0; b < 4; ++b) x[4 * i + b] = e4m3_decode(static_cast<uint8_t>(w[i] >> (8 * b))) * scale;
    } else {
      // Words 0-1 are the first 16-value block, 2-3 the second; nibble n of a word is value n.
      const float sf = e4m3_decode(static_cast<uint8_t>(scales >> (8 * (i / 2))));
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        x[8 * i + n] = nvfp4_decode_value(static_cast<uint8_t>((w[i] >> (4 * n)) & 0xFu), sf, scale);
      }
    }
  }
}

template <KvFormat F, int D>
__device__ __forceinline__ void store_chunk(const RawChunk<F, D>& r, float scale, float* dst,
                                            int pitch) {
  using R = Rows<F, D>;
#pragma unroll
  for (int j = 0; j < R::kPerThread; ++j) {
    const int i = threadIdx.x + j * kThreads;
    if (i >= R::kVecs) break;
    float x[R::kElems];
    decode<F>(r.v[j], r.scales[j], scale, x);
    float4* out = reinterpret_cast<float4*>(dst + (i / R::kVecsPerRow) * pitch +
                                            (i % R::kVecsPerRow) * R::kElems);
#pragma unroll
    for (int e = 0; e < R::kElems / 4; ++e) {
      out[e] = make_float4(x[4 * e], x[4 * e + 1], x[4 * e + 2], x[4 * e + 3]);
    }
  }
}

template <KvFormat F, int D, int GP>
__global__ void __launch_bounds__(kThreads) attention_cuda_core(const AttentionArgs a) {
  constexpr int kHeads = GP / kWarps;  // query heads per warp
  constexpr int kDims = D >= 32 ? D / 32 : 1;  // output dims per lane (lanes past D idle)
  constexpr int kPitch = D + 4;        // row pitch: lane-per-row reads hit 8 distinct banks
  __shared__ __align__(16) float q_s[GP][D];
  __shared__ __align__(16) float k_s[kChunk][kPitch];
  __shared__ __align__(16) float v_s[kChunk][kPitch];
  __shared__ __align__(16) float p_s[kWarps][kHeads][kChunk];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int dim_lane = D >= 32 ? lane : min(lane, D - 1);  // a valid column for every lane to read
  allow_dependent_launch();  // the split merge waits for the partial outputs itself
  CtaWork w = cta_work(a);

  for (int i = threadIdx.x; i < GP * D / 4; i += kThreads) {
    const int h = i / (D / 4), c = i % (D / 4);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (h < a.group && !w.bad) v = __ldg(reinterpret_cast<const float4*>(a.q + out_row(a, w, h) * D) + c);
    reinterpret_cast<float4*>(q_s[h])[c] = v;
  }
  if (a.operands_16bit) {  // each head rounded as formats/attention_operands.h rounds it
    constexpr bool kF16 = kOperandsF16<F>;
    __syncthreads();
    for (int h = warp; h < GP; h += kWarps) {
      float amax = 0.0f;
      for (int d = lane; d < D; d += 32) amax = fmaxf(amax, fabsf(q_s[h][d]));
      const int shift = kF16 ? f16_query_shift(warp_max(amax)) : 0;
      for (int d = lane; d < D; d += 32) q_s[h][d] = times_pow2(round16<kF16>(times_pow2(q_s[h][d], shift)), -shift);
    }
  }
  float m[kHeads], l[kHeads], acc[kHeads][kDims];
#pragma unroll
  for (int hh = 0; hh < kHeads; ++hh) {
    m[hh] = neg_inf();
    l[hh] = 0.0f;
#pragma unroll
    for (int e = 0; e < kDims; ++e) acc[hh][e] = 0.0f;
  }

  for (int item = w.first; item < w.last; ++item) {
    int keys = 0;
    const uint8_t* page = item_page(a, w, item, keys);
    if (page == nullptr) continue;
    for (int c0 = 0; c0 < keys; c0 += kChunk) {
      const int valid = min(kChunk, keys - c0);
      const bool flat = D < 16 && a.flat_heads;  // only heads under one NVFP4 block are flattened
      const int key_step = flat ? a.kv_heads : 1;
      const int row0 = flat ? c0 * a.kv_heads + w.g : w.g * kBlockTokens + c0;
      RawChunk<F, D> kr, vr;
      load_chunk(kr, page, a.k_codes, a.k_scales, row0, key_step, valid);
      load_chunk(vr, page, a.v_codes, a.v_scales, row0, key_step, valid);
      __syncthreads();  // q_s is written; the previous chunk's k_s, v_s, p_s are consumed
      store_chunk(kr, a.k_scale, &k_s[0][0], kPitch);
      store_chunk(vr, a.v_scale, &v_s[0][0], kPitch);
      __syncthreads();

      // Scores, lane = key, in the CPU reference's order of four partial sums.
      float dot[kHeads][4];
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) dot[hh][0] = dot[hh][1] = dot[hh][2] = dot[hh][3] = 0.0f;
#pragma unroll 8
      for (int d = 0; d < D; d += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(&k_s[lane][d]);
#pragma unroll
        for (int hh = 0; hh < kHeads; ++hh) {
          const float4 q4 = *reinterpret_cast<const float4*>(&q_s[warp * kHeads + hh][d]);
          dot[hh][0] = fmaf(q4.x, k4.x, dot[hh][0]);
          dot[hh][1] = fmaf(q4.y, k4.y, dot[hh][1]);
          dot[hh][2] = fmaf(q4.z, k4.z, dot[hh][2]);
          dot[hh][3] = fmaf(q4.w, k4.w, dot[hh][3]);
        }
      }
#pragma unroll
      for (int hh = 0; hh < kHeads; ++hh) {
        const float s = lane < valid
                            ? ((dot[hh][0] + dot[hh][2]) + (dot[hh][1] + dot[hh][3])) * a.score_scale
                            : neg_inf();
        const float m_new = fmaxf(m[hh], warp_max(s));
        const float alpha = rescale_factor(m[hh], m_new);
        const float p = weight(s, m_new);
        m[hh] = m_new;
        l[hh] = l[hh] * alpha + p;  // this lane's share; summed over the warp at the end
#pragma unroll
        for (int e = 0; e < kDims; ++e) acc[hh][e] *= alpha;
        p_s[warp][hh][lane] = a.operands_16bit ? round16<kOperandsF16<F>>(p) : p;  // the weight P V takes
      }
      __syncwarp();

      // P.V: masked keys have p = 0 and zero V rows, so all 32 keys can be summed.
#pragma unroll 2
      for (int k = 0; k < kChunk; k += 4) {
        float4 p4[kHeads];
#pragma unroll
        for (int hh = 0; hh < kHeads; ++hh) p4[hh] = *reinterpret_cast<const float4*>(&p_s[warp][hh][k]);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          float v[kDims];
#pragma unroll
          for (int e = 0; e < kDims; ++e) v[e] = v_s[k + kk][dim_lane * kDims + e];
#pragma unroll
          for (int hh = 0; hh < kHeads; ++hh) {
            const float p = kk == 0 ? p4[hh].x : kk == 1 ? p4[hh].y : kk == 2 ? p4[hh].z : p4[hh].w;
#pragma unroll
            for (int e = 0; e < kDims; ++e) acc[hh][e] = fmaf(p, v[e], acc[hh][e]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int hh = 0; hh < kHeads; ++hh) {
    const int h = warp * kHeads + hh;
    const RowEnd end = row_end(a, w, m[hh], warp_sum(l[hh]), 1.0f);
    if (h >= a.group || (D < 32 && lane >= D)) continue;
    float* o = out_ptr(a, w, h) + lane * kDims;
#pragma unroll
    for (int e = 0; e < kDims; ++e) o[e] = acc[hh][e] * end.scale;
    if (lane == 0) store_lse(a, w, h, end.lse);
  }
}

// out = sum_s 2^(lse_s - max) O_s / sum_s 2^(lse_s - max), one warp per output row (token, query
// head). The lanes read the splits' lse side by side and agree on their maximum by shuffles;
// then each lane sums its 4-dim quads of the row over the splits in split order, four splits'
// loads issued before any is used, so a split costs a fraction of a round trip rather than the
// two of loading its lse and then its output. Splits with lse = -inf (no key) are skipped; a NaN
// lse (invalid index) makes the row NaN. Launched as a programmatic dependent of the attention
// kernel, so its launch overlaps that kernel's last CTAs; it waits for their partial outputs
// before reading any.
constexpr int kMergeThreads = 256, kMergeRows = kMergeThreads / 32;

__global__ void __launch_bounds__(kMergeThreads) merge_splits(const AttentionArgs a) {
  wait_for_prerequisite_grid();
  const int64_t rows = int64_t{a.tokens} * a.q_heads;
  const int64_t row = int64_t{blockIdx.x} * kMergeRows + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // the whole warp
  float top = neg_inf();
  bool nan = false;
  for (int s = lane; s < a.splits; s += 32) {
    const float lse = a.partial_lse[s * rows + row];
    nan |= isnan(lse);
    top = fmaxf(top, lse);
  }
  top = warp_max(top);
  nan = __any_sync(0xffffffffu, nan);
  const int quads = a.head_dim / 4;
  const float* lse_of = a.partial_lse + row;                                          // split s: s * rows further
  const float4* part = reinterpret_cast<const float4*>(a.partial_out) + row * quads;  // s * rows * quads further
  for (int q = lane; q < quads; q += 32) {
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float sum = 0.0f;
    auto add = [&](float lse, const float4& p) {
      if (lse == neg_inf()) return;
      const float wgt = exp2f(lse - top);
      sum += wgt;
      o.x = fmaf(wgt, p.x, o.x);
      o.y = fmaf(wgt, p.y, o.y);
      o.z = fmaf(wgt, p.z, o.z);
      o.w = fmaf(wgt, p.w, o.w);
    };
    constexpr int kInFlight = 4;
    int s = 0;
    for (; s + kInFlight <= a.splits; s += kInFlight) {
      float lse[kInFlight];
      float4 p[kInFlight];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) {
        lse[k] = lse_of[(s + k) * rows];
        p[k] = part[(s + k) * rows * quads + q];
      }
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) add(lse[k], p[k]);
    }
    for (; s < a.splits; ++s) add(lse_of[s * rows], part[s * rows * quads + q]);
    const float inv = nan ? nan_f32() : 1.0f / sum;  // no split with a key: 0 * inf = NaN, as on the CPU
    reinterpret_cast<float4*>(a.out)[row * quads + q] = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
  }
}

template <KvFormat F, int D, int GP>
cudaError_t launch_or_count(const AttentionArgs& a, cudaStream_t stream, int* ctas_per_sm) {
  if (ctas_per_sm != nullptr) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, attention_cuda_core<F, D, GP>, kThreads, 0);
  }
  attention_cuda_core<F, D, GP><<<dim3(a.tokens, a.kv_heads, a.splits), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template <KvFormat F, int D>
cudaError_t launch_or_count(const AttentionArgs& a, cudaStream_t stream, int* ctas_per_sm) {
  if (a.group <= 4) return launch_or_count<F, D, 4>(a, stream, ctas_per_sm);
  if (a.group <= 8) return launch_or_count<F, D, 8>(a, stream, ctas_per_sm);
  return launch_or_count<F, D, 16>(a, stream, ctas_per_sm);
}

template <KvFormat F>
cudaError_t launch_or_count(const AttentionArgs& a, cudaStream_t stream, int* ctas_per_sm) {
  // Heads of 8 and 16 dims only where a head's row is whole 16-byte vectors.
  if constexpr (kBits<F> >= 16) {
    if (a.head_dim == 8) return launch_or_count<F, 8>(a, stream, ctas_per_sm);
  }
  if constexpr (kBits<F> >= 8) {
    if (a.head_dim == 16) return launch_or_count<F, 16>(a, stream, ctas_per_sm);
  }
  switch (a.head_dim) {
    case 32: return launch_or_count<F, 32>(a, stream, ctas_per_sm);
    case 64: return launch_or_count<F, 64>(a, stream, ctas_per_sm);
    case 128: return launch_or_count<F, 128>(a, stream, ctas_per_sm);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_or_count(const AttentionArgs& a, cudaStream_t stream, int* ctas_per_sm) {
  switch (a.format) {
    case KvFormat::kF32: return launch_or_count<KvFormat::kF32>(a, stream, ctas_per_sm);
    case KvFormat::kBF16: return launch_or_count<KvFormat::kBF16>(a, stream, ctas_per_sm);
    case KvFormat::kFP8: return launch_or_count<KvFormat::kFP8>(a, stream, ctas_per_sm);
    case KvFormat::kNVFP4: return launch_or_count<KvFormat::kNVFP4>(a, stream, ctas_per_sm);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_attention_cuda_core(const AttentionArgs& a, cudaStream_t stream) {
  return launch_or_count(a, stream, nullptr);
}

cudaError_t cuda_core_ctas_per_sm(const AttentionArgs& a, int* ctas) {
  return launch_or_count(a, nullptr, ctas);
}

cudaError_t attention_ctas_per_sm(const AttentionArgs& a, AttentionKernel kernel, int* ctas) {
  switch (kernel) {
    case AttentionKernel::kTensorCore: return tensor_core_ctas_per_sm(a, ctas);
    case AttentionKernel::kPrefill: return prefill_ctas_per_sm(a, ctas);
    case AttentionKernel::kCudaCore: break;
  }
  return cuda_core_ctas_per_sm(a, ctas);
}

cudaError_t launch_paged_attention(const AttentionArgs& a, AttentionKernel kernel,
                                   cudaStream_t stream) {
  if (kernel == AttentionKernel::kPrefill) return launch_attention_prefill(a, stream);  // one split
  const cudaError_t status = kernel == AttentionKernel::kTensorCore
                                 ? launch_attention_tensor_core(a, stream)
                                 : launch_attention_cuda_core(a, stream);
  if (status != cudaSuccess || a.splits == 1) return status;
  const int64_t rows = int64_t{a.tokens} * a.q_heads;
  return launch_dependent(merge_splits, dim3(static_cast<unsigned>((rows + kMergeRows - 1) / kMergeRows)),
                          dim3(kMergeThreads), 0, stream, a);
}

}  // namespace fp4::cuda::detail
