// Element types the engine stores or computes in. Packed 4-bit types report the size of one
// byte holding two elements; block scales live in their own arrays (docs/formats/).
#pragma once

#include <cstdint>
#include <string_view>

namespace fp4 {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kE4M3,    // FP8 "fn": no inf, max 448
  kE5M2,
  kUE8M0,   // power-of-two scale, MX formats
  kE2M1x2,  // two E2M1 values per byte, even element in the low nibble
  kU8,
  kI32,
};

constexpr int dtype_bits(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 32;
    case DType::kF16: case DType::kBF16: return 16;
    case DType::kE4M3: case DType::kE5M2: case DType::kUE8M0: case DType::kU8: return 8;
    case DType::kE2M1x2: return 4;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kE4M3: return "e4m3";
    case DType::kE5M2: return "e5m2";
    case DType::kUE8M0: return "ue8m0";
    case DType::kE2M1x2: return "e2m1x2";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
  }
  return "?";
}

}  // namespace fp4
