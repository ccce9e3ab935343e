#include "tools/fp4serve/bench_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/thread_pool.h"
#include "formats/minifloat.h"

namespace fp4::bench {

std::vector<uint8_t> random_tensor(int64_t count, DType dtype, uint64_t seed) {
  const int elem = dtype_bits(dtype) / 8;
  std::vector<uint8_t> bytes(static_cast<size_t>(count * elem));
  constexpr int64_t kChunk = 1 << 16;
  parallel_for((count + kChunk - 1) / kChunk, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(c + 1)));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::uniform_real_distribution<float> log_scale(-8.0f, 8.0f);
      float block_scale = 1.0f;
      for (int64_t i = c * kChunk; i < std::min(count, (c + 1) * kChunk); ++i) {
        if (i % 16 == 0) block_scale = std::exp2(log_scale(rng));
        const float v = normal(rng) * block_scale;
        if (dtype == DType::kBF16) {
          const uint16_t h = bf16_encode(v);
          std::memcpy(&bytes[i * 2], &h, 2);
        } else {
          std::memcpy(&bytes[i * 4], &v, 4);
        }
      }
    }
  });
  return bytes;
}

std::string shape_string(int64_t rows, int64_t cols) { return fmt::format("{}x{}", rows, cols); }

}  // namespace fp4::bench
