// Random K/V pages for the attention benchmarks: bytes that decode to finite values of
// magnitude below kPageValueBound in every page format, with the scales they are meant for.
#pragma once

#include <cstdint>

#include "kvcache/page_io.h"
#include "kvcache/page_layout.h"

namespace fp4::bench {

constexpr double kPageValueBound = 4.0;

uint64_t splitmix(uint64_t& state);

// Random bytes made into values of magnitude < kPageValueBound: FP32 and BF16 exponents of
// 0.25..2, FP8 codes without NaN (times the scale 4/448), NVFP4 block scales of 0.25..1 (times
// g = 2/3). `scales`: the region holds NVFP4 block scales.
void fill_page_region(kvcache::PageDType dtype, bool scales, uint8_t* p, int64_t bytes, uint64_t& state);

// Every region of `pages` pages.
void fill_pages(const kvcache::PageLayout& layout, uint8_t* pool, int64_t pages, uint64_t& state);

// The K and V scales the filled pages are meant to be read with.
kvcache::KvScales bench_page_scales(kvcache::PageDType dtype);

}  // namespace fp4::bench
