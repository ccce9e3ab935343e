// Our codecs against an oracle we did not write: the CUDA toolkit's host conversion routines
// (cuda_fp8.h, cuda_fp4.h, cuda_fp16.h, cuda_bf16.h), compiled here by the host compiler.
// E4M3 and E2M1, the formats of the cache and the experts, are compared on every one of the
// 2^32 float bit patterns; E5M2, UE8M0, BF16 and FP16 on every rounding class (see
// for_rounding_classes); decoders on every code.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "core/thread_pool.h"
#include "formats/minifloat.h"

namespace fp4 {
namespace {

struct Mismatch {
  std::atomic<uint64_t> count{0};
  std::mutex mutex;
  uint32_t first_input = 0;
  uint32_t ours = 0, theirs = 0;
  bool any = false;

  void record(uint32_t input, uint32_t o, uint32_t t) {
    count++;
    std::lock_guard<std::mutex> lock(mutex);
    if (!any || input < first_input) {
      any = true;
      first_input = input;
      ours = o;
      theirs = t;
    }
  }
};

// Runs `compare(bits, mismatch)` for every 32-bit pattern, on all cores. A template, so the
// comparison inlines into the loop: 2^32 indirect calls would cost more than the conversions.
template <typename Compare>
void for_all_floats(const Compare& compare, Mismatch& mismatch) {
  constexpr int64_t kChunks = 1 << 12;
  constexpr int64_t kPerChunk = (int64_t{1} << 32) / kChunks;
  parallel_for(kChunks, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const uint32_t base = static_cast<uint32_t>(c * kPerChunk);
      for (uint32_t i = 0; i < kPerChunk; ++i) compare(base + i, mismatch);
    }
  });
}

// Runs `compare` on every value of the top 20 bits (sign, exponent, 11 mantissa bits) combined
// with 16 patterns of the low 12 bits. A round-to-nearest-even encoder to a format with M <= 10
// mantissa bits sees, below its kept bits, only the guard bit (bit 22 - M, or higher where the
// result is subnormal: always among the top 20 bits) and whether anything below it is set. The
// patterns give every guard/sticky combination (0, lowest bit, highest bit, all, a midpoint
// run, random), so every rounding case of every exponent is covered, at 1/256 of the cost.
template <typename Compare>
void for_rounding_classes(const Compare& compare, Mismatch& mismatch) {
  const uint32_t low_patterns[16] = {0x000, 0x001, 0x800, 0xFFF, 0x7FF, 0x400, 0x801, 0x0F0,
                                     0x123, 0x9AB, 0x555, 0xAAA, 0x3C3, 0xC3C, 0x010, 0xFFE};
  parallel_for(int64_t{1} << 20, [&](int64_t begin, int64_t end) {
    for (int64_t top = begin; top < end; ++top)
      for (uint32_t low : low_patterns) compare((static_cast<uint32_t>(top) << 12) | low, mismatch);
  });
}

#define EXPECT_NO_MISMATCH(m, what)                                                         \
  EXPECT_EQ((m).count.load(), 0u) << what << ": first mismatch at float bits 0x" << std::hex \
                                  << (m).first_input << ": ours 0x" << (m).ours             \
                                  << ", toolkit 0x" << (m).theirs

TEST(ToolkitAgreement, E4M3EncodeAllFloats) {
  Mismatch m;
  for_all_floats([](uint32_t b, Mismatch& mm) {
    const float f = bits_to_float(b);
    const uint32_t ours = e4m3_encode(f), theirs = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
    if (ours != theirs) mm.record(b, ours, theirs);
  }, m);
  EXPECT_NO_MISMATCH(m, "e4m3 satfinite");
}

TEST(ToolkitAgreement, E2M1EncodeAllFloats) {
  Mismatch m;
  for_all_floats([](uint32_t b, Mismatch& mm) {
    const float f = bits_to_float(b);
    const uint32_t ours = e2m1_encode(f), theirs = __nv_cvt_float_to_fp4(f, __NV_E2M1, cudaRoundNearest);
    if (ours != theirs) mm.record(b, ours, theirs);
  }, m);
  EXPECT_NO_MISMATCH(m, "e2m1");
}

TEST(ToolkitAgreement, E5M2EncodeEveryRoundingClass) {
  Mismatch m;
  for_rounding_classes([](uint32_t b, Mismatch& mm) {
    const float f = bits_to_float(b);
    const uint32_t ours = e5m2_encode(f), theirs = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2);
    if (ours != theirs) mm.record(b, ours, theirs);
  }, m);
  EXPECT_NO_MISMATCH(m, "e5m2 satfinite");
}

TEST(ToolkitAgreement, UE8M0EncodeEveryRoundingClass) {
  Mismatch ceil_m, floor_m;
  for_rounding_classes([&floor_m](uint32_t b, Mismatch& mm) {
    const float f = bits_to_float(b);
    const uint32_t ours = ue8m0_encode_ceil(f), theirs = __nv_cvt_float_to_e8m0(f, __NV_SATFINITE, cudaRoundPosInf);
    if (ours != theirs) mm.record(b, ours, theirs);
    const uint32_t ours_f = ue8m0_encode_floor(f), theirs_f = __nv_cvt_float_to_e8m0(f, __NV_SATFINITE, cudaRoundZero);
    if (ours_f != theirs_f) floor_m.record(b, ours_f, theirs_f);
  }, ceil_m);
  EXPECT_NO_MISMATCH(ceil_m, "ue8m0 round up");
  EXPECT_NO_MISMATCH(floor_m, "ue8m0 round toward zero");
}

// BF16 and FP16 NaN payloads are not specified by either side; NaN must stay NaN.
TEST(ToolkitAgreement, BF16AndFP16EncodeEveryRoundingClass) {
  Mismatch bf16_m, fp16_m;
  for_rounding_classes([&fp16_m](uint32_t b, Mismatch& mm) {
    const float f = bits_to_float(b);
    const __nv_bfloat16 tb = __float2bfloat16_rn(f);
    const __half th = __float2half_rn(f);
    uint16_t theirs_b, theirs_h;
    std::memcpy(&theirs_b, &tb, 2);
    std::memcpy(&theirs_h, &th, 2);
    const uint16_t ours_b = bf16_encode(f), ours_h = fp16_encode(f);
    if (is_nan(f)) {
      if (!is_nan(bf16_decode(ours_b)) || !is_nan(bf16_decode(theirs_b))) mm.record(b, ours_b, theirs_b);
      if (!is_nan(fp16_decode(ours_h)) || !is_nan(fp16_decode(theirs_h))) fp16_m.record(b, ours_h, theirs_h);
      return;
    }
    if (ours_b != theirs_b) mm.record(b, ours_b, theirs_b);
    if (ours_h != theirs_h) fp16_m.record(b, ours_h, theirs_h);
  }, bf16_m);
  EXPECT_NO_MISMATCH(bf16_m, "bf16 rn");
  EXPECT_NO_MISMATCH(fp16_m, "fp16 rn");
}

// Decoders: every code, value for value (NaN for NaN).
void expect_same_value(float ours, float theirs, uint32_t code, const char* what) {
  if (is_nan(theirs)) {
    EXPECT_TRUE(is_nan(ours)) << what << " code 0x" << std::hex << code;
  } else {
    EXPECT_EQ(float_to_bits(ours), float_to_bits(theirs)) << what << " code 0x" << std::hex << code
                                                          << ": ours " << ours << " toolkit " << theirs;
  }
}

float half_raw_to_float(__half_raw raw) { return __half2float(__half(raw)); }

TEST(ToolkitAgreement, DecodeEveryCode) {
  for (uint32_t c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    expect_same_value(e4m3_decode(code), half_raw_to_float(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)), c, "e4m3");
    expect_same_value(e5m2_decode(code), half_raw_to_float(__nv_cvt_fp8_to_halfraw(code, __NV_E5M2)), c, "e5m2");
    expect_same_value(ue8m0_decode(code), __bfloat162float(__nv_bfloat16(__nv_cvt_e8m0_to_bf16raw(code))), c, "ue8m0");
    if (c < 16)
      expect_same_value(e2m1_decode(code), half_raw_to_float(__nv_cvt_fp4_to_halfraw(code, __NV_E2M1)), c, "e2m1");
  }
  for (uint32_t c = 0; c < 65536; ++c) {
    const auto code = static_cast<uint16_t>(c);
    __half_raw hr;
    hr.x = code;
    expect_same_value(fp16_decode(code), half_raw_to_float(hr), c, "fp16");
    __nv_bfloat16_raw br;
    br.x = code;
    expect_same_value(bf16_decode(code), __bfloat162float(__nv_bfloat16(br)), c, "bf16");
  }
}

}  // namespace
}  // namespace fp4
