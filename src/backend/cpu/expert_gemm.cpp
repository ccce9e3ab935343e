// The routed experts' NVFP4 matmul on the CPU: the reference the GPU's grouped GEMM is held to,
// written for clarity (each output a double sum of exact products, rounded once to float).
#include <array>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/minifloat.h"
#include "formats/nvfp4.h"

namespace fp4::cpu {

namespace {

// The sixteen E2M1 values by code, from the codec (formats/minifloat.h).
const std::array<float, 16> kE2m1Values = [] {
  std::array<float, 16> v{};
  for (int code = 0; code < 16; ++code) v[code] = e2m1_decode(static_cast<uint8_t>(code));
  return v;
}();

// y = g * sum x w, or with kMagnitude g * sum |x w|.
template <bool kMagnitude>
void run(const ExpertGemmParams& p) {
  FP4_CHECK(p.experts > 0 && p.n > 0 && p.k > 0 && p.k % kNvfp4BlockElems == 0,
            "expert_gemm: {} experts of [{}, {}] (k a multiple of 16)", p.experts, p.n, p.k);
  FP4_CHECK(p.row_offsets[0] == 0 && p.row_offsets[p.experts] == p.rows,
            "expert_gemm: row offsets run from {} to {}, the rows are {}", p.row_offsets[0],
            p.row_offsets[p.experts], p.rows);
  for (int64_t e = 0; e < p.experts; ++e) {
    FP4_CHECK(p.row_offsets[e] <= p.row_offsets[e + 1], "expert_gemm: row offsets decrease at expert {}", e);
  }
  parallel_for_cost(p.experts * p.n, 4 * (p.rows / p.experts + 1) * p.k, [&](int64_t i0, int64_t i1) {
    std::vector<float> w(static_cast<size_t>(p.k));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t e = i / p.n, j = i % p.n;
      if (p.row_offsets[e] == p.row_offsets[e + 1]) continue;
      const uint8_t* codes = p.values + (e * p.n + j) * (p.k / 2);
      const uint8_t* sf = p.scales + (e * p.n + j) * (p.k / kNvfp4BlockElems);
      for (int64_t b = 0; b < p.k / kNvfp4BlockElems; ++b) {
        const float scale = e4m3_decode(sf[b]);
        for (int64_t i = 0; i < kNvfp4BlockElems; ++i) {
          const int64_t c = b * kNvfp4BlockElems + i;
          w[c] = kE2m1Values[(codes[c / 2] >> (4 * (c % 2))) & 0xF] * scale;  // exact
        }
      }
      for (int64_t r = p.row_offsets[e]; r < p.row_offsets[e + 1]; ++r) {
        const uint16_t* x = p.x + r * p.k;
        // Four partial sums (k is a multiple of 16): the engine runs this on the CPU, and one
        // running double sum is a chain of dependent additions.
        double acc[4] = {0.0, 0.0, 0.0, 0.0};
        for (int64_t c = 0; c < p.k; c += 4) {
          for (int l = 0; l < 4; ++l) {
            const double product = static_cast<double>(bf16_decode(x[c + l])) * w[c + l];
            acc[l] += kMagnitude ? std::abs(product) : product;
          }
        }
        const double sum = (acc[0] + acc[2]) + (acc[1] + acc[3]);
        p.y[r * p.n + j] = static_cast<float>(sum) * p.global_scales[e];
      }
    }
  });
}

}  // namespace

void expert_gemm(const ExpertGemmParams& p) { run<false>(p); }
void expert_gemm_magnitude(const ExpertGemmParams& p) { run<true>(p); }

}  // namespace fp4::cpu
