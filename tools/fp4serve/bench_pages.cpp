#include "tools/fp4serve/bench_pages.h"

#include <algorithm>
#include <cstring>

namespace fp4::bench {

uint64_t splitmix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

using kvcache::PageDType;

void fill_page_region(PageDType dtype, bool scales, uint8_t* p, int64_t bytes, uint64_t& state) {
  for (int64_t i = 0; i < bytes; i += 8) {
    uint64_t r = splitmix(state);
    uint8_t b[8];
    std::memcpy(b, &r, 8);
    if (dtype == PageDType::kFP32) {
      for (int w = 0; w < 2; ++w) {
        uint32_t x;
        std::memcpy(&x, b + 4 * w, 4);
        x = (x & 0x807FFFFFu) | ((125u + (x >> 23) % 3) << 23);
        std::memcpy(b + 4 * w, &x, 4);
      }
    } else if (dtype == PageDType::kBF16) {
      for (int w = 0; w < 4; ++w) {
        uint16_t x;
        std::memcpy(&x, b + 2 * w, 2);
        x = static_cast<uint16_t>((x & 0x807Fu) | ((125u + (x >> 7) % 3) << 7));
        std::memcpy(b + 2 * w, &x, 2);
      }
    } else if (dtype == PageDType::kFP8) {
      for (uint8_t& x : b) x = (x & 0x7F) == 0x7F ? x & 0xFE : x;
    } else if (scales) {
      for (uint8_t& x : b) x = static_cast<uint8_t>(0x28 + x % 17);  // E4M3 0.25 .. 1
    }
    std::memcpy(p + i, b, static_cast<size_t>(std::min<int64_t>(8, bytes - i)));
  }
}

void fill_pages(const kvcache::PageLayout& layout, uint8_t* pool, int64_t pages, uint64_t& state) {
  for (int64_t pg = 0; pg < pages; ++pg) {
    uint8_t* page = pool + pg * layout.page_bytes;
    for (const auto* r : {&layout.k_codes, &layout.v_codes}) fill_page_region(layout.dtype, false, page + r->offset, r->bytes, state);
    for (const auto* r : {&layout.k_scales, &layout.v_scales}) fill_page_region(layout.dtype, true, page + r->offset, r->bytes, state);
  }
}

kvcache::KvScales bench_page_scales(kvcache::PageDType dtype) {
  if (dtype == kvcache::PageDType::kFP8) return {4.0f / 448, 4.0f / 448};
  if (dtype == kvcache::PageDType::kNVFP4) return {2.0f / 3, 2.0f / 3};
  return {};
}

}  // namespace fp4::bench
