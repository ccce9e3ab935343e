#include "kvcache/page_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "formats/minifloat.h"
#include "formats/nvfp4.h"
#include "kvcache/page_layout.h"
#include "tests/support/expect_error.h"
#include "tests/support/random.h"
#include "tests/unit/kvcache/page_geometries.h"

namespace fp4::kvcache {
namespace {

using page_cases::Geometry;
using page_cases::kAllDTypes;
using page_cases::kGeometries;
using page_cases::layout_for;

constexpr uint8_t kPoison = 0xA5;

float amax_of(const std::vector<float>& x) {
  float m = 0.0f;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

// Scales a layer would carry: FP8 calibrated so the largest value maps to E4M3's 448, NVFP4's
// global scale as ModelOpt derives it (index pages: 1); the other formats ignore them.
float layer_scale(PageDType dtype, bool index, const std::vector<float>& x) {
  if (dtype == PageDType::kFP8) return amax_of(x) / kE4M3Max;
  if (dtype == PageDType::kNVFP4 && !index) return nvfp4_global_scale_for_amax(amax_of(x));
  return 1.0f;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// A page of 128 random tokens written in a random slot order, and what read_page returns.
struct Filled {
  PageLayout layout;
  std::vector<float> k, v;  // [128, heads, head_dim] inputs
  float sk = 1.0f, sv = 1.0f;
  std::vector<uint8_t> page;
  std::vector<float> k_back, v_back;
};

Filled fill_page(PageDType dtype, const Geometry& g, std::mt19937_64& rng) {
  Filled f;
  f.layout = layout_for(dtype, g);
  const int64_t vec = f.layout.vector_elems(), n = vec * kPageTokens;
  f.k = testing::random_floats(n, testing::Distribution::kBlockScaled, rng);
  f.v = testing::random_floats(n, testing::Distribution::kStudentT3, rng);
  f.sk = layer_scale(dtype, !g.has_v, f.k);
  f.sv = layer_scale(dtype, false, f.v);
  f.page.assign(f.layout.page_bytes, kPoison);
  std::vector<int> order(kPageTokens);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  f.k_back.assign(n, 0.0f);
  for (int t : order) {
    if (g.has_v) {
      write_token(f.layout, f.page.data(), t, &f.k[t * vec], &f.v[t * vec], {f.sk, f.sv});
    } else {
      write_index_token(f.layout, f.page.data(), t, &f.k[t * vec], f.sk);
    }
  }
  if (g.has_v) {
    f.v_back.assign(n, 0.0f);
    read_page(f.layout, f.page.data(), kPageTokens, f.k_back.data(), f.v_back.data(),
              {f.sk, f.sv});
  } else {
    read_index_page(f.layout, f.page.data(), kPageTokens, f.k_back.data(), f.sk);
  }
  return f;
}

// Each dtype's check of one value: exact for FP32, the bf16-rounded input for BF16, and for
// FP8 half an E4M3 ulp (relative 2^-4 for normals; 2^-10 absolute below 2^-6, both in units
// of the scale s) plus the fp32 rounding of x / s and of code * s (2^-24 relative each,
// bounded by 2^-22 with room).
void expect_round_trip(PageDType dtype, float x, float back, float s, const std::string& where) {
  switch (dtype) {
    case PageDType::kFP32: ASSERT_EQ(bits(back), bits(x)) << where; break;
    case PageDType::kBF16: ASSERT_EQ(bits(back), bits(bf16_decode(bf16_encode(x)))) << where; break;
    case PageDType::kFP8: {
      const float bound = (0x1p-4f * std::fabs(x) + 0x1p-10f * s) * (1.0f + 0x1p-22f) +
                          0x1p-22f * std::fabs(x);
      ASSERT_LE(std::fabs(back - x), bound) << where << " x=" << x << " s=" << s;
      break;
    }
    case PageDType::kNVFP4: break;  // checked block by block against formats/nvfp4.h
  }
}

// NVFP4: every block's bytes in the page are nvfp4_quantize_block's on the same 16 values,
// found through the layout's (token, head) offsets, and read_page returns exactly
// nvfp4_dequantize_block's values.
void expect_nvfp4_blocks(const PageLayout& l, const uint8_t* page, const PageRegion& codes,
                         const PageRegion& scales, const std::vector<float>& x,
                         const std::vector<float>& back, float g, const char* what) {
  const int64_t vec = l.vector_elems();
  for (int t = 0; t < l.page_tokens; ++t) {
    for (int64_t first = 0; first < vec; first += kNvfp4BlockElems) {
      const int head = static_cast<int>(first / l.head_dim);
      const int64_t within = first % l.head_dim;  // 0 whenever blocks run per head
      uint8_t packed[kNvfp4BlockCodeBytes];
      const uint8_t scale = nvfp4_quantize_block(&x[t * vec + first], g, packed);
      const int64_t at = l.code_offset(codes, t, head) + within / 2;
      ASSERT_EQ(std::memcmp(page + at, packed, sizeof packed), 0)
          << what << " codes, token " << t << " value " << first;
      ASSERT_EQ(page[l.scale_offset(scales, t, head) + within / kNvfp4BlockElems], scale)
          << what << " scale, token " << t << " value " << first;
      float ref[kNvfp4BlockElems];
      nvfp4_dequantize_block(packed, scale, g, ref);
      for (int i = 0; i < kNvfp4BlockElems; ++i) {
        ASSERT_EQ(bits(back[t * vec + first + i]), bits(ref[i])) << what << " token " << t;
      }
    }
  }
}

TEST(PageIo, WriteThenReadRoundTrips) {
  auto rng = testing::seeded_rng(1);
  for (PageDType dtype : kAllDTypes) {
    for (const Geometry& g : kGeometries) {
      SCOPED_TRACE(std::string(page_dtype_name(dtype)) + " " + g.name);
      const Filled f = fill_page(dtype, g, rng);
      if (dtype == PageDType::kNVFP4) {
        const PageLayout& l = f.layout;
        expect_nvfp4_blocks(l, f.page.data(), l.k_codes, l.k_scales, f.k, f.k_back, f.sk, "K");
        if (g.has_v) {
          expect_nvfp4_blocks(l, f.page.data(), l.v_codes, l.v_scales, f.v, f.v_back, f.sv, "V");
        }
        continue;
      }
      for (size_t i = 0; i < f.k.size(); ++i) {
        expect_round_trip(dtype, f.k[i], f.k_back[i], f.sk, "K " + std::to_string(i));
        if (g.has_v) expect_round_trip(dtype, f.v[i], f.v_back[i], f.sv, "V " + std::to_string(i));
      }
    }
  }
}

TEST(PageIo, WritingASlotTouchesNoOtherSlot) {
  auto rng = testing::seeded_rng(2);
  for (PageDType dtype : kAllDTypes) {
    for (const Geometry& g : kGeometries) {
      SCOPED_TRACE(std::string(page_dtype_name(dtype)) + " " + g.name);
      const PageLayout l = layout_for(dtype, g);
      const int slot = std::uniform_int_distribution<int>(0, kPageTokens - 1)(rng);
      const auto k = testing::random_floats(l.vector_elems(), testing::Distribution::kGaussian, rng);
      const auto v = testing::random_floats(l.vector_elems(), testing::Distribution::kGaussian, rng);
      std::vector<uint8_t> page(l.page_bytes, kPoison);
      if (g.has_v) {
        write_token(l, page.data(), slot, k.data(), v.data());
      } else {
        write_index_token(l, page.data(), slot, k.data());
      }
      // The slot's rows: one run of codes and one of scales per group, in each of K and V.
      std::vector<bool> mine(l.page_bytes, false);
      for (int group = 0; group < l.groups; ++group) {
        const int head = group * l.heads_per_group();
        for (const PageRegion* r : {&l.k_codes, &l.v_codes}) {
          if (r->bytes == 0) continue;
          const int64_t at = l.code_offset(*r, slot, head);
          std::fill_n(mine.begin() + at, l.code_row_bytes, true);
        }
        for (const PageRegion* r : {&l.k_scales, &l.v_scales}) {
          if (r->bytes == 0) continue;
          const int64_t at = l.scale_offset(*r, slot, head);
          std::fill_n(mine.begin() + at, l.scale_row_bytes, true);
        }
      }
      int64_t changed = 0;
      for (int64_t i = 0; i < l.page_bytes; ++i) {
        if (!mine[i]) {
          ASSERT_EQ(page[i], kPoison) << "byte " << i << " outside slot " << slot;
        } else {
          changed += page[i] != kPoison;
        }
      }
      EXPECT_GT(changed, 0) << "slot " << slot << " was not written";
    }
  }
}

TEST(PageIo, RefusesBadArguments) {
  const PageLayout kv = kv_page_layout(PageDType::kFP8, 4, 8);
  const PageLayout idx = index_page_layout(PageDType::kNVFP4, 32);
  std::vector<uint8_t> page(kv.page_bytes);
  std::vector<float> x(kPageTokens * kv.vector_elems(), 1.0f);
  testing::expect_error([&] { write_token(kv, page.data(), 128, x.data(), x.data()); },
                        {"slot 128", "128 tokens"});
  testing::expect_error([&] { write_token(kv, page.data(), -1, x.data(), x.data()); },
                        {"slot -1"});
  testing::expect_error([&] { write_token(kv, page.data(), 0, x.data(), x.data(), {0.0f, 1.0f}); },
                        {"K scale", "positive"});
  testing::expect_error(
      [&] { write_token(kv, page.data(), 0, x.data(), x.data(), {1.0f, std::nanf("")}); },
      {"V scale"});
  testing::expect_error([&] { write_token(idx, page.data(), 0, x.data(), x.data()); },
                        {"index-K page", "K/V page is expected"});
  testing::expect_error([&] { write_index_token(kv, page.data(), 0, x.data()); },
                        {"K/V page", "index-K page is expected"});
  testing::expect_error([&] { write_index_token(idx, page.data(), 0, x.data(), 2.0f); },
                        {"no global scale"});
  testing::expect_error([&] { read_page(kv, page.data(), 129, x.data(), x.data()); },
                        {"129 tokens"});
}

}  // namespace
}  // namespace fp4::kvcache
