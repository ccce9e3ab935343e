// CPU reference for the paged caches: quantize one token into its slot of a page, and
// dequantize a page back to floats: the reference a CUDA cache writer and the attention kernels
// are to be tested against (byte for byte on the write side). All pointers are host memory;
// the page layout is page_layout.h's.
//
// Per-layer scales are in the dequantization direction (a stored value decodes to
// code x scale) and live outside the page:
//   FP8:   code = E4M3_RNE_SAT(x / s), an IEEE division; x^ = e4m3(code) * s.
//   NVFP4: s is the global scale g of formats/nvfp4.h, blocks quantized by
//          nvfp4_quantize_block, so the bytes are exactly that function's.
//   FP32 and BF16 ignore it (BF16 rounds to nearest even).
// Multi-byte values (FP32, BF16) are stored little-endian, as on the host and the GPU.
#pragma once

#include <cstdint>

#include "kvcache/page_layout.h"

namespace fp4::kvcache {

// The per-layer scales of the main K/V cache (FP8 scale, or NVFP4 global scale), default 1.
struct KvScales {
  float k = 1.0f;
  float v = 1.0f;
};

// Writes one token's K and V, all heads, into slot `slot` of a main K/V page; touches no byte
// of any other slot.
void write_token(const PageLayout& layout, uint8_t* page, int slot,
                 const float* k,  // [heads, head_dim]
                 const float* v,  // [heads, head_dim]
                 KvScales scales = {});

// Writes one token's index-K vector into slot `slot` of an index page. `scale` is the FP8
// per-layer scale; NVFP4 index pages have no global scale, so it must be 1 there.
void write_index_token(const PageLayout& layout, uint8_t* page, int slot,
                       const float* index_k,  // [index_head_dim]
                       float scale = 1.0f);

// Dequantizes slots 0..num_tokens-1 of a main K/V page, token-major.
void read_page(const PageLayout& layout, const uint8_t* page, int num_tokens,
               float* k_out,  // [num_tokens, heads, head_dim]
               float* v_out,  // [num_tokens, heads, head_dim]
               KvScales scales = {});

// Dequantizes slots 0..num_tokens-1 of an index page.
void read_index_page(const PageLayout& layout, const uint8_t* page, int num_tokens,
                     float* index_k_out,  // [num_tokens, index_head_dim]
                     float scale = 1.0f);

}  // namespace fp4::kvcache
