#include "kvcache/page_io.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "formats/minifloat.h"
#include "formats/nvfp4.h"

namespace fp4::kvcache {
namespace {

// One region pair (codes, scales) of a page: K, V or the index key.
struct Plane {
  const PageRegion& codes;
  const PageRegion& scales;
  float scale;
};

void check_scale(const PageLayout& layout, float scale, const char* name) {
  if (layout.dtype != PageDType::kFP8 && layout.dtype != PageDType::kNVFP4) return;
  FP4_CHECK(std::isfinite(scale) && scale > 0.0f,
            "{} page: the {} scale must be finite and positive, got {}",
            page_dtype_name(layout.dtype), name, scale);
}

void check_pool(const PageLayout& layout, bool want_v) {
  FP4_CHECK(layout.has_v == want_v, "a {} page was passed where a {} page is expected",
            layout.has_v ? "K/V" : "index-K", want_v ? "K/V" : "index-K");
  FP4_CHECK(layout.groups > 0 && layout.page_bytes > 0, "the page layout is empty");
}

void write_plane(const PageLayout& l, uint8_t* page, const Plane& p, int slot, const float* x) {
  const int n = l.group_elems;
  for (int g = 0; g < l.groups; ++g) {
    const float* src = x + int64_t{g} * n;
    const int64_t row = int64_t{g} * l.page_tokens + slot;
    uint8_t* codes = page + p.codes.offset + row * l.code_row_bytes;
    switch (l.dtype) {
      case PageDType::kFP32: std::memcpy(codes, src, sizeof(float) * n); break;
      case PageDType::kBF16:
        for (int e = 0; e < n; ++e) {
          const uint16_t h = bf16_encode(src[e]);
          std::memcpy(codes + 2 * e, &h, sizeof h);
        }
        break;
      case PageDType::kFP8:
        for (int e = 0; e < n; ++e) codes[e] = e4m3_encode(src[e] / p.scale);
        break;
      case PageDType::kNVFP4: {
        uint8_t* scales = page + p.scales.offset + row * l.scale_row_bytes;
        for (int b = 0; b < n / kNvfp4BlockElems; ++b) {
          scales[b] = nvfp4_quantize_block(src + b * kNvfp4BlockElems, p.scale,
                                           codes + b * kNvfp4BlockCodeBytes);
        }
        break;
      }
    }
  }
}

// Reads slot `t` into x[heads * head_dim]: the group order is the vector order.
void read_plane(const PageLayout& l, const uint8_t* page, const Plane& p, int t, float* x) {
  const int n = l.group_elems;
  for (int g = 0; g < l.groups; ++g) {
    float* dst = x + int64_t{g} * n;
    const int64_t row = int64_t{g} * l.page_tokens + t;
    const uint8_t* codes = page + p.codes.offset + row * l.code_row_bytes;
    switch (l.dtype) {
      case PageDType::kFP32: std::memcpy(dst, codes, sizeof(float) * n); break;
      case PageDType::kBF16:
        for (int e = 0; e < n; ++e) {
          uint16_t h;
          std::memcpy(&h, codes + 2 * e, sizeof h);
          dst[e] = bf16_decode(h);
        }
        break;
      case PageDType::kFP8:
        for (int e = 0; e < n; ++e) dst[e] = e4m3_decode(codes[e]) * p.scale;
        break;
      case PageDType::kNVFP4: {
        const uint8_t* scales = page + p.scales.offset + row * l.scale_row_bytes;
        for (int b = 0; b < n / kNvfp4BlockElems; ++b) {
          nvfp4_dequantize_block(codes + b * kNvfp4BlockCodeBytes, scales[b], p.scale,
                                 dst + b * kNvfp4BlockElems);
        }
        break;
      }
    }
  }
}

void check_slot(const PageLayout& l, int slot) {
  FP4_CHECK(slot >= 0 && slot < l.page_tokens, "token slot {} is outside a page of {} tokens",
            slot, l.page_tokens);
}

void check_count(const PageLayout& l, int num_tokens) {
  FP4_CHECK(num_tokens >= 0 && num_tokens <= l.page_tokens,
            "cannot read {} tokens from a page of {} tokens", num_tokens, l.page_tokens);
}

}  // namespace

void write_token(const PageLayout& layout, uint8_t* page, int slot, const float* k,
                 const float* v, KvScales scales) {
  check_pool(layout, true);
  check_slot(layout, slot);
  check_scale(layout, scales.k, "K");
  check_scale(layout, scales.v, "V");
  FP4_CHECK(page && k && v, "write_token needs a page, K and V");
  write_plane(layout, page, {layout.k_codes, layout.k_scales, scales.k}, slot, k);
  write_plane(layout, page, {layout.v_codes, layout.v_scales, scales.v}, slot, v);
}

void write_index_token(const PageLayout& layout, uint8_t* page, int slot, const float* index_k,
                       float scale) {
  check_pool(layout, false);
  check_slot(layout, slot);
  check_scale(layout, scale, "index-K");
  FP4_CHECK(layout.dtype != PageDType::kNVFP4 || scale == 1.0f,
            "NVFP4 index-K pages have no global scale, got {}", scale);
  FP4_CHECK(page && index_k, "write_index_token needs a page and an index-K vector");
  write_plane(layout, page, {layout.k_codes, layout.k_scales, scale}, slot, index_k);
}

void read_page(const PageLayout& layout, const uint8_t* page, int num_tokens, float* k_out,
               float* v_out, KvScales scales) {
  check_pool(layout, true);
  check_count(layout, num_tokens);
  check_scale(layout, scales.k, "K");
  check_scale(layout, scales.v, "V");
  FP4_CHECK(page && k_out && v_out, "read_page needs a page, K and V outputs");
  const int64_t vec = layout.vector_elems();
  for (int t = 0; t < num_tokens; ++t) {
    read_plane(layout, page, {layout.k_codes, layout.k_scales, scales.k}, t, k_out + t * vec);
    read_plane(layout, page, {layout.v_codes, layout.v_scales, scales.v}, t, v_out + t * vec);
  }
}

void read_index_page(const PageLayout& layout, const uint8_t* page, int num_tokens,
                     float* index_k_out, float scale) {
  check_pool(layout, false);
  check_count(layout, num_tokens);
  check_scale(layout, scale, "index-K");
  FP4_CHECK(layout.dtype != PageDType::kNVFP4 || scale == 1.0f,
            "NVFP4 index-K pages have no global scale, got {}", scale);
  FP4_CHECK(page && index_k_out, "read_index_page needs a page and an output");
  const int64_t vec = layout.vector_elems();
  for (int t = 0; t < num_tokens; ++t) {
    read_plane(layout, page, {layout.k_codes, layout.k_scales, scale}, t, index_k_out + t * vec);
  }
}

}  // namespace fp4::kvcache
