// Paged attention, tensor-core kernel for BF16, FP8 and NVFP4 pages (mma.sync m16n8k16, BF16
// in, FP32 accumulation). Design, bytes and numerics: docs/kernels/attention_decode.md.
//
// One CTA of 4 warps per (token, KV head, split); the group's query heads are the MMA's 16 rows
// (zero rows pad a smaller group). Warp w takes keys [16w, 16w + 16) and [64 + 16w, 80 + 16w) of
// every block: it stages them (K and V, dequantized to BF16 without the per-layer scale) in its
// own shared-memory tile, so the block loop needs no CTA barrier, and keeps its own online
// softmax; the four warps' states are merged once at the end.
//
// Exactness: NVFP4 values (E2M1 x E4M3 block scale) and FP8 values (E4M3) are exact in BF16,
// and BF16 pages are BF16; the per-layer scale (FP8 scale, NVFP4 global scale) multiplies the
// FP32 scores and outputs instead. Q and P are FP32, split into BF16 hi + lo (two MMAs each),
// which leaves a relative error of 2^-18 per product instead of BF16's 2^-9.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/paged_attention_device.cuh"
#include "backend/cuda/paged_attention_launch.h"
#include "formats/minifloat.h"

namespace fp4::cuda::detail {
namespace {

constexpr int kThreads = kAttentionThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 16;  // query heads per CTA: the MMA's M
constexpr int kSub = 16;   // keys per warp sub-tile: the MMA's K for P.V
constexpr int kSubTiles = kBlockTokens / (kWarps * kSub);

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// c += a . b for a 16x16 BF16 A (row-major fragment) and a 16x8 B (column-major fragment).
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes to shared memory; zero-filled when !full.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(full ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162_raw h) {
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return bf16x2_bits(__floats2bfloat162_rn(lo, hi));
}

// x0, x1 = hi + lo + r with hi, lo BF16 and |r| <= 2^-18 |x|: x - hi is exact in FP32.
__device__ __forceinline__ void split_bf16(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 back = __bfloat1622float2(h);
  hi = bf16x2_bits(h);
  lo = pack_bf16(x0 - back.x, x1 - back.y);
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// Eight E2M1 codes (value 2i in the low nibble of byte i) as four BF16 pairs, (v0, v1) first.
// The magnitudes come from byte tables indexed by prmt: low and high bytes of the BF16 bits of
// 0, .5, 1, 1.5, 2, 3, 4, 6. The signs come from prmt's sign-replicate mode: byte k of w << 4
// has value 2k's sign as its top bit, byte k of w value 2k+1's.
__device__ __forceinline__ void e2m1x8_to_bf16x2(uint32_t w, uint32_t out[4]) {
  constexpr uint32_t kLow03 = 0xC0800000u, kLow47 = 0xC0804000u;
  constexpr uint32_t kHigh03 = 0x3F3F3F00u, kHigh47 = 0x40404040u;
  const uint32_t mag = w & 0x77777777u;
  const uint32_t low_a = prmt(kLow03, kLow47, mag), high_a = prmt(kHigh03, kHigh47, mag);
  const uint32_t low_b = prmt(kLow03, kLow47, mag >> 16), high_b = prmt(kHigh03, kHigh47, mag >> 16);
  const uint32_t w4 = w << 4;
  out[0] = prmt(low_a, high_a, 0x5140) | (prmt(w4, w, 0xC080) & 0x80008000u);
  out[1] = prmt(low_a, high_a, 0x7362) | (prmt(w4, w, 0xD090) & 0x80008000u);
  out[2] = prmt(low_b, high_b, 0x5140) | (prmt(w4, w, 0xE0A0) & 0x80008000u);
  out[3] = prmt(low_b, high_b, 0x7362) | (prmt(w4, w, 0xF0B0) & 0x80008000u);
}

__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                   *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// Rows [row0, row0 + 16) of this KV head's K and V into the warp's tiles as BF16 without the
// per-layer scale; keys at or past `valid` become zeros (their bytes may be unwritten slots).
template <KvFormat F, int D>
__device__ __forceinline__ void stage(const AttentionArgs& a, const uint8_t* page, int row0,
                                      int valid, uint16_t* k_s, uint16_t* v_s, int lane) {
  constexpr int P = D + 8;
  if constexpr (F == KvFormat::kBF16) {
    constexpr int kVecsPerRow = D / 8;
#pragma unroll
    for (int i = lane; i < kSub * kVecsPerRow; i += 32) {
      const int key = i / kVecsPerRow, piece = i % kVecsPerRow;
      const int64_t at = (row0 + key) * int64_t{2 * D} + piece * 16;
      cp_async16(k_s + key * P + piece * 8, page + a.k_codes + at, key < valid);
      cp_async16(v_s + key * P + piece * 8, page + a.v_codes + at, key < valid);
    }
    cp_async_wait_all();
  } else {
    constexpr bool kFp4 = F == KvFormat::kNVFP4;
    constexpr int kValues = kFp4 ? 32 : 16;  // per 16-byte vector
    constexpr int kVecsPerRow = D / kValues;
    constexpr int kVecs = kSub * kVecsPerRow;
    constexpr int kPer = (kVecs + 31) / 32;
    constexpr int kRowBytes = kFp4 ? D / 2 : D;
    uint4 raw[2][kPer];
    uint32_t scales[2][kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = lane + 32 * j, key = i / kVecsPerRow, piece = i % kVecsPerRow;
      const bool live = i < kVecs && key < valid;
      const int64_t row = row0 + key;
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        const int64_t codes = kv == 0 ? a.k_codes : a.v_codes;
        const int64_t block_scales = kv == 0 ? a.k_scales : a.v_scales;
        raw[kv][j] = live ? __ldg(reinterpret_cast<const uint4*>(page + codes + row * kRowBytes) + piece)
                          : make_uint4(0, 0, 0, 0);
        scales[kv][j] = 0;
        if (kFp4 && live) {
          scales[kv][j] = __ldg(reinterpret_cast<const unsigned short*>(
                                    page + block_scales + row * (D / 16)) + piece);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = lane + 32 * j, key = i / kVecsPerRow, piece = i % kVecsPerRow;
      if (i >= kVecs) break;
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        const uint32_t w[4] = {raw[kv][j].x, raw[kv][j].y, raw[kv][j].z, raw[kv][j].w};
        uint32_t x[kValues / 2];
        if constexpr (kFp4) {
#pragma unroll
          for (int b = 0; b < 2; ++b) {  // words 2b, 2b + 1 are one 16-value block
            const float sf = e4m3_decode(static_cast<uint8_t>(scales[kv][j] >> (8 * b)));
            const uint32_t sf2 = pack_bf16(sf, sf);  // exact: E4M3 fits BF16
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              e2m1x8_to_bf16x2(w[2 * b + h], &x[8 * b + 4 * h]);
#pragma unroll
              for (int e = 0; e < 4; ++e) x[8 * b + 4 * h + e] = mul_bf16x2(x[8 * b + 4 * h + e], sf2);
            }
          }
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const uint32_t word = w[e / 2] >> (16 * (e % 2));
            x[e] = pack_bf16(e4m3_decode(static_cast<uint8_t>(word)),
                             e4m3_decode(static_cast<uint8_t>(word >> 8)));
          }
        }
        uint4* dst = reinterpret_cast<uint4*>((kv == 0 ? k_s : v_s) + key * P + piece * kValues);
#pragma unroll
        for (int e = 0; e < kValues / 8; ++e) {
          dst[e] = make_uint4(x[4 * e], x[4 * e + 1], x[4 * e + 2], x[4 * e + 3]);
        }
      }
    }
  }
}

template <KvFormat F, int D>
__global__ void __launch_bounds__(kThreads) attention_tensor_core(const AttentionArgs a) {
  constexpr int P = D + 8;  // BF16 row pitch: the 8 rows of an ldmatrix hit distinct banks
  constexpr int kKSteps = D / 16, kNTiles = D / 8;
  __shared__ __align__(16) uint16_t q_s[2][kRows * P];          // Q as BF16 hi and lo
  __shared__ __align__(16) uint16_t kv_s[kWarps][2][kSub * P];  // per warp: K, V; then outputs
  __shared__ float ml_s[kWarps][kRows][2];
  static_assert(sizeof(kv_s) == kWarps * kRows * P * sizeof(float), "outputs reuse the tiles");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, grp = lane / 4, tig = lane % 4;
  CtaWork w = cta_work(a);

  for (int i = threadIdx.x; i < kRows * D; i += kThreads) {
    const int h = i / D, d = i % D;
    const float x = h < a.group ? __ldg(a.q + out_row(a, w, h) * D + d) : 0.0f;
    const __nv_bfloat16 hi = __float2bfloat16_rn(x);
    q_s[0][h * P + d] = __bfloat16_as_ushort(hi);
    q_s[1][h * P + d] = __bfloat16_as_ushort(__float2bfloat16_rn(x - __bfloat162float(hi)));
  }
  __syncthreads();

  uint16_t* k_s = kv_s[warp][0];
  uint16_t* v_s = kv_s[warp][1];
  // Fragment rows: this lane holds rows grp (r = 0) and grp + 8 (r = 1) of S, P and O.
  float o[kNTiles][4] = {};
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
  const float kq = a.k_scale * a.score_scale;
  // ldmatrix: lane j gives row j % 8 of matrix j / 8.
  const int a_row = (lane / 8 % 2) * 8 + lane % 8, a_col = (lane / 16) * 8;  // Q, and V (trans)
  const int b_row = (lane / 16) * 8 + lane % 8, b_col = (lane / 8 % 2) * 8;  // K

  for (int item = w.first; item < w.last; ++item) {
    int keys = 0;
    const uint8_t* page = item_page(a, w, item, keys);
    if (page == nullptr) continue;
    for (int sub = 0; sub < kSubTiles; ++sub) {
      const int key0 = (sub * kWarps + warp) * kSub;
      if (key0 >= keys) break;
      const int valid = min(kSub, keys - key0);
      __syncwarp();  // the previous sub-tile's reads of k_s, v_s are done
      stage<F, D>(a, page, w.g * kBlockTokens + key0, valid, k_s, v_s, lane);
      __syncwarp();

      float s[2][4] = {};  // n-tile t: keys 8t .. 8t + 7
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        uint32_t qh[4], ql[4], kb[4];
        ldmatrix_x4(qh, &q_s[0][a_row * P + ks * 16 + a_col]);
        ldmatrix_x4(ql, &q_s[1][a_row * P + ks * 16 + a_col]);
        ldmatrix_x4(kb, &k_s[b_row * P + ks * 16 + b_col]);
        mma(s[0], qh, kb[0], kb[1]);
        mma(s[0], ql, kb[0], kb[1]);
        mma(s[1], qh, kb[2], kb[3]);
        mma(s[1], ql, kb[2], kb[3]);
      }

      uint32_t ph[4], pl[4];  // P as the A fragment of one 16-key step
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float x[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = (e / 2) * 8 + 2 * tig + e % 2;
          x[e] = key < valid ? s[e / 2][2 * r + e % 2] * kq : neg_inf();
        }
        float top = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
        const float m_new = fmaxf(m[r], top);
        const float alpha = rescale_factor(m[r], m_new);
        m[r] = m_new;
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) p[e] = weight(x[e], m_new);
        l[r] = l[r] * alpha + ((p[0] + p[1]) + (p[2] + p[3]));  // this lane's share of the row
#pragma unroll
        for (int t = 0; t < kNTiles; ++t) {
          o[t][2 * r] *= alpha;
          o[t][2 * r + 1] *= alpha;
        }
        split_bf16(p[0], p[1], ph[r], pl[r]);
        split_bf16(p[2], p[3], ph[2 + r], pl[2 + r]);
      }

#pragma unroll
      for (int t = 0; t < kNTiles; t += 2) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, &v_s[a_row * P + t * 8 + a_col]);
        mma(o[t], ph, vb[0], vb[1]);
        mma(o[t], pl, vb[0], vb[1]);
        mma(o[t + 1], ph, vb[2], vb[3]);
        mma(o[t + 1], pl, vb[2], vb[3]);
      }
    }
  }

  // Merge the four warps' softmax states: out = sum_w 2^(m_w - M) O_w / sum_w 2^(m_w - M) l_w.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  __syncthreads();  // every warp is done with its tiles
  float* o_s = reinterpret_cast<float*>(&kv_s[0][0][0]);  // [kWarps][kRows][P]
#pragma unroll
  for (int t = 0; t < kNTiles; ++t) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      *reinterpret_cast<float2*>(&o_s[(warp * kRows + grp + 8 * r) * P + t * 8 + 2 * tig]) =
          make_float2(o[t][2 * r], o[t][2 * r + 1]);
    }
  }
  if (tig == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      ml_s[warp][grp + 8 * r][0] = m[r];
      ml_s[warp][grp + 8 * r][1] = l[r];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kRows * D; i += kThreads) {
    const int h = i / D, d = i % D;
    if (h >= a.group) break;  // padding rows
    float top = neg_inf();
#pragma unroll
    for (int v = 0; v < kWarps; ++v) top = fmaxf(top, ml_s[v][h][0]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) {
      const float f = weight(ml_s[v][h][0], top);
      sum = fmaf(ml_s[v][h][1], f, sum);
      acc = fmaf(o_s[(v * kRows + h) * P + d], f, acc);
    }
    const RowEnd end = row_end(a, w, top, sum, a.v_scale);
    out_ptr(a, w, h)[d] = acc * end.scale;
    if (d == 0) store_lse(a, w, h, end.lse);
  }
}

template <KvFormat F>
void launch_tc(const AttentionArgs& a, dim3 grid, cudaStream_t stream) {
  if (a.head_dim == 32) attention_tensor_core<F, 32><<<grid, kThreads, 0, stream>>>(a);
  if (a.head_dim == 64) attention_tensor_core<F, 64><<<grid, kThreads, 0, stream>>>(a);
  if (a.head_dim == 128) attention_tensor_core<F, 128><<<grid, kThreads, 0, stream>>>(a);
}

}  // namespace

cudaError_t launch_attention_tensor_core(const AttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(a.tokens, a.kv_heads, a.splits);
  switch (a.format) {
    case KvFormat::kBF16: launch_tc<KvFormat::kBF16>(a, grid, stream); break;
    case KvFormat::kFP8: launch_tc<KvFormat::kFP8>(a, grid, stream); break;
    case KvFormat::kNVFP4: launch_tc<KvFormat::kNVFP4>(a, grid, stream); break;
    case KvFormat::kF32: return cudaErrorInvalidValue;  // FP32 is not exact in BF16
  }
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
