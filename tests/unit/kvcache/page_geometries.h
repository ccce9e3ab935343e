// The page geometries both kvcache page tests run over, so that they cover the same cases.
#pragma once

#include "kvcache/page_layout.h"

namespace fp4::kvcache::page_cases {

constexpr PageDType kAllDTypes[] = {PageDType::kFP32, PageDType::kBF16, PageDType::kFP8,
                                    PageDType::kNVFP4};

struct Geometry {
  const char* name;
  int heads;
  int head_dim;
  bool has_v;
};

// M3's main and index pages, a tiny model whose head_dim 8 forces flattened NVFP4 blocks, and
// odd sizes (3 blocks per head; 48 values flattened over 6 heads).
constexpr Geometry kGeometries[] = {
    {"m3_kv", 4, 128, true}, {"m3_index", 1, 128, false}, {"tiny_kv", 4, 8, true},
    {"odd_kv", 2, 48, true}, {"flat6_kv", 6, 8, true},    {"small_index", 1, 32, false},
};

inline PageLayout layout_for(PageDType dtype, const Geometry& g) {
  return g.has_v ? kv_page_layout(dtype, g.heads, g.head_dim)
                 : index_page_layout(dtype, g.head_dim);
}

}  // namespace fp4::kvcache::page_cases
