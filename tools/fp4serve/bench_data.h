// Random benchmark inputs: Gaussian values whose magnitude varies from block to block, so
// that block scales take many different values, as they do in real activations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fp4::bench {

// `count` elements of `dtype` (f32 or bf16) as raw bytes.
std::vector<uint8_t> random_tensor(int64_t count, DType dtype, uint64_t seed);

std::string shape_string(int64_t rows, int64_t cols);

}  // namespace fp4::bench
