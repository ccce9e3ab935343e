// Random MXFP8 weights for the kernel tests: E4M3 codes of every finite value (subnormals and
// both zeros among them), UE8M0 scales in a chosen range, and the values they decode to.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "formats/mxfp8.h"

namespace fp4::testing {

struct Mxfp8Weight {
  std::vector<uint8_t> codes, scales;  // [n, k], [n, k / 32]
  std::vector<float> values;           // decoded
};

// Scales from 2^(lowest - 127) to 2^(lowest + spread - 128).
inline Mxfp8Weight random_mxfp8(int64_t n, int64_t k, int lowest, int spread, std::mt19937_64& rng) {
  Mxfp8Weight w{std::vector<uint8_t>(n * k), std::vector<uint8_t>(n * k / kMxfp8BlockElems),
                std::vector<float>(n * k)};
  for (uint8_t& c : w.codes) {
    do c = static_cast<uint8_t>(rng() >> 56); while ((c & 0x7F) == 0x7F);  // no NaN
  }
  for (uint8_t& s : w.scales) s = static_cast<uint8_t>(lowest + static_cast<int>(rng() % spread));
  for (size_t b = 0; b < w.scales.size(); ++b) {
    mxfp8_dequantize_block(&w.codes[b * kMxfp8BlockElems], w.scales[b], &w.values[b * kMxfp8BlockElems]);
  }
  return w;
}

}  // namespace fp4::testing
