// The NVFP4 expert matmul on the GPU, every kernel (FP16 and BF16 MMAs, FP32 on the CUDA cores),
// against fp4::cpu::expert_gemm on the same weights and activations: experts with no token, one, a
// partial MMA tile, whole tiles and more than one pass of 32 tokens; random codes (all 16, NaN-free
// by construction), E4M3 block scales over the normal and subnormal range and zero, random global
// scales, rows of very different magnitudes; outputs poisoned first.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/expert_gemm.h"
#include "formats/minifloat.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

struct Weights {
  std::vector<uint8_t> values, scales;
  std::vector<float> global;
};

// Scale codes up to 0x5F (E4M3 30): the products stay far from BF16's and FP32's limits.
// `exact`: scale 1 or 2 and global scale 1, so that every sum below is an exact float.
Weights random_weights(int64_t experts, int64_t n, int64_t k, bool exact, std::mt19937_64& rng) {
  Weights w;
  w.values.resize(experts * n * k / 2);
  w.scales.resize(experts * n * k / 16);
  std::uniform_int_distribution<int> byte(0, 255), scale_code(0, 0x5F), coin(0, 1);
  std::uniform_real_distribution<float> log2_g(-4.0f, 4.0f);
  for (auto& v : w.values) v = static_cast<uint8_t>(byte(rng));
  for (auto& s : w.scales) s = exact ? (coin(rng) ? 0x38 : 0x40) : static_cast<uint8_t>(scale_code(rng));
  for (int64_t e = 0; e < experts; ++e) w.global.push_back(exact ? 1.0f : std::exp2(log2_g(rng)));
  return w;
}

// `extreme`: row magnitudes from 2^-120 to 2^100, and a row of zeros, for the FP16 kernel's
// per-row scaling (its cap at 2^127 and FP16's range).
std::vector<uint16_t> random_x(int64_t rows, int64_t k, bool exact, std::mt19937_64& rng, bool extreme = false) {
  std::vector<uint16_t> x(rows * k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-8, 8);
  std::uniform_real_distribution<float> log2_scale(extreme ? -120.0f : -6.0f, extreme ? 100.0f : 6.0f);
  for (int64_t r = 0; r < rows; ++r) {
    // Rows of different magnitudes; with `extreme`, every fifth row is zeros.
    const float scale = extreme && r % 5 == 2 ? 0.0f : std::exp2(log2_scale(rng));
    for (int64_t i = 0; i < k; ++i) {
      x[r * k + i] = bf16_encode(exact ? static_cast<float>(small(rng)) : normal(rng) * scale);
    }
  }
  return x;
}

void run_case(const std::vector<int32_t>& rows_per_expert, int64_t n, int64_t k, bool exact, std::mt19937_64& rng,
              bool extreme = false) {
  const int64_t experts = static_cast<int64_t>(rows_per_expert.size());
  std::vector<int32_t> offsets(experts + 1, 0);
  std::partial_sum(rows_per_expert.begin(), rows_per_expert.end(), offsets.begin() + 1);
  const int64_t rows = offsets.back();
  const Weights w = random_weights(experts, n, k, exact, rng);
  const auto x = random_x(rows, k, exact, rng, extreme);
  std::vector<float> want(rows * n);
  ExpertGemmParams c{.x = x.data(), .row_offsets = offsets.data(), .values = w.values.data(),
                     .scales = w.scales.data(), .global_scales = w.global.data(), .y = want.data(),
                     .rows = rows, .experts = experts, .n = n, .k = k};
  cpu::expert_gemm(c);
  std::vector<float> magnitude(rows * n);  // g S per output, S = sum |x w| (rounded once: negligible)
  ExpertGemmParams m = c;
  m.y = magnitude.data();
  cpu::expert_gemm_magnitude(m);
  // g sum |w| per output: the magnitude run on activations of ones.
  const std::vector<uint16_t> ones(rows * k, bf16_encode(1.0f));
  std::vector<float> weight_sum(rows * n);
  m.x = ones.data();
  m.y = weight_sum.data();
  cpu::expert_gemm_magnitude(m);
  std::vector<double> row_max(rows, 0.0);  // M_r = max |x| of row r
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < k; ++i) row_max[r] = std::max<double>(row_max[r], std::abs(bf16_decode(x[r * k + i])));
  }

  const auto d_x = cuda::DeviceBuffer::copy_of(x), d_off = cuda::DeviceBuffer::copy_of(offsets),
             d_values = cuda::DeviceBuffer::copy_of(w.values), d_scales = cuda::DeviceBuffer::copy_of(w.scales),
             d_global = cuda::DeviceBuffer::copy_of(w.global);
  using V = cuda::ExpertGemmF16Variant;
  const cuda::ExpertGemmOptions kernels[] = {{cuda::ExpertGemmKernel::kF16, V::kWarpRing},
                                             {cuda::ExpertGemmKernel::kF16, V::kSharedX},
                                             {cuda::ExpertGemmKernel::kBf16, V::kWarpRing},
                                             {cuda::ExpertGemmKernel::kSkinny, V::kAuto}};
  for (const cuda::ExpertGemmOptions& options : kernels) {
    const bool f16 = options.kernel == cuda::ExpertGemmKernel::kF16;
    // Rows near 2^-120 make the BF16 and skinny kernels' products subnormal floats, outside what
    // their bound covers; the FP16 kernel scales them up first.
    if (extreme && !f16) continue;
    const char* names[] = {"auto", "BF16", "FP16", "skinny"};
    SCOPED_TRACE(::testing::Message() << experts << " experts of [" << n << ", " << k << "]" << (exact ? ", exact" : "")
                                      << (extreme ? ", extreme rows" : "") << ", " << names[int(options.kernel)]
                                      << " kernel, variant " << static_cast<int>(options.f16_variant));
    cuda::DeviceBuffer d_y(std::max<int64_t>(rows * n, 1) * 4);
    d_y.fill(0xFF);  // NaN: a row or feature left unwritten fails
    ExpertGemmParams d = c;
    d.x = d_x.as<uint16_t>();
    d.row_offsets = d_off.as<int32_t>();
    d.values = d_values.as<uint8_t>();
    d.scales = d_scales.as<uint8_t>();
    d.global_scales = d_global.as<float>();
    d.y = d_y.as<float>();
    cuda::expert_gemm(d, nullptr, options);
    FP4_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(rows * n);
    d_y.download(got.data(), got.size() * 4);

    constexpr double u = 0x1p-24;
    for (int64_t e = 0; e < experts; ++e) {
      for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          // Bound: every product x * w is exact in FP32 (BF16 x BF16, FP16 x FP16 of the same
          // values times powers of two, or BF16 x the value times 2^-14 on the CUDA cores), so only
          // the sums round. (The skinny kernel's sums of 16 products, each then times its block
          // scale, are k + k / 16 roundings of at most u of a partial magnitude, within the bound
          // below.) The MMA accumulates k products in FP32; taking each of its additions as off by
          // at most 2 u of the running magnitude (the adder may truncate), itself at most S = sum
          // |x w|, gives 2k u S. The hardware adds 16 products and the accumulator at a time, so
          // the worst case is 17/16 of that: 2.125k u S. The CPU's double sum is exact to 2^-53 k S
          // and rounds once to float (u S). Both multiply by g once (u each); the FP16 kernel's
          // power of two after g is exact. So |got - want| <= g S (2.125k + 4) u.
          double tol = magnitude[r * n + j] * (2.125 * k + 4) * u;
          // The FP16 kernel rounds x 2^s to FP16, s putting M_r = max |x| of the row in
          // [2^14, 2^15) (s capped at 127): exact from 2^-17 up, since BF16 has 8 significant
          // bits and FP16's spacing there is 2^-24; below, off by at most 2^-25, i.e. x by
          // 2^-25-s <= max(M_r 2^-39, 2^-152). That adds g sum |w| of it.
          if (f16) tol += weight_sum[r * n + j] * std::max(row_max[r] * 0x1p-39, 0x1p-152);
          // Exact inputs: every sum is an exact float, so 0.
          if (exact) tol = 0.0;
          const float gv = got[r * n + j], wv = want[r * n + j];
          ASSERT_LE(std::abs(double{gv} - wv), tol)
              << "expert " << e << " row " << r << " feature " << j << ": GPU " << gv << ", CPU " << wv;
        }
      }
    }
  }
}

class ExpertGemmKernel : public testing::GpuTest {};

TEST_F(ExpertGemmKernel, MatchesCpuOnRandomWeights) {
  auto rng = testing::seeded_rng(41);
  // No token, one, a partial tile, a whole tile, a tile and one, more than a pass of 32.
  run_case({0, 1, 7, 8, 9, 33, 0, 70}, 128, 256, false, rng);
  if (HasFatalFailure()) return;
  run_case({3, 0, 16}, 192, 768, false, rng);
  if (HasFatalFailure()) return;
  // k = 128 (mod 256): a last step of one 128-value block (the built-in model's down projection
  // is [256, 128]).
  run_case({2, 9, 0, 33}, 256, 128, false, rng);
  if (HasFatalFailure()) return;
  run_case({4, 1}, 64, 384, false, rng);
  if (HasFatalFailure()) return;
  // 70 experts, 3 with rows: the FP16 kernel's grid has a slot per row, and CTA y finds the
  // y-th expert with rows from the offsets (32 experts a ballot, 128 a round of loads).
  std::vector<int32_t> sparse(70, 0);
  sparse[3] = sparse[40] = sparse[69] = 1;
  run_case(sparse, 64, 256, false, rng);
  if (HasFatalFailure()) return;
  // 300 experts, those with rows at the edges of the ballots and rounds of that search.
  std::vector<int32_t> wide(300, 0);
  wide[0] = wide[31] = wide[127] = wide[128] = wide[255] = wide[299] = 1;
  wide[160] = 2;
  run_case(wide, 64, 256, false, rng);
  if (HasFatalFailure()) return;
  // Rows from 2^-120 to 2^100 and rows of zeros, also with a last step of one block.
  run_case({6, 11, 0, 35}, 128, 512, false, rng, true);
  if (HasFatalFailure()) return;
  run_case({9, 2}, 64, 384, false, rng, true);
  if (HasFatalFailure()) return;
  // More than a tile of tokens over several steps ending in a one-block step (k = 384).
  run_case({12, 0, 41}, 64, 384, false, rng);
  if (HasFatalFailure()) return;
  // The warp ring's CTAs start along k at step (CTA mod steps): 5 CTAs of an expert over 5
  // steps, the one-block step landing at every place of a CTA's order.
  run_case({3, 5, 0, 9}, 320, 1152, false, rng);
  if (HasFatalFailure()) return;
  // One token's four experts at the M3 width of k (the skinny kernel's lanes take 6 chunks
  // each, one in flight beside the one they multiply), and a k whose 100 chunks leave lanes 4-31
  // one fewer than lanes 0-3.
  run_case({1, 0, 1, 1, 0, 1}, 64, 6144, false, rng);
  if (HasFatalFailure()) return;
  run_case({0, 1, 1}, 128, 3200, false, rng);
}

// The choice is host logic: it runs without a GPU too.
TEST(ExpertGemmChoice, AutoTakesTheSkinnyKernelForOneTokensExperts) {
  ExpertGemmParams p{.scales = reinterpret_cast<const uint8_t*>(uintptr_t{256}), .rows = 4, .experts = 128,
                     .n = 6144, .k = 6144};  // a decode step of one token, top-4
  EXPECT_EQ(cuda::expert_gemm_kernel_for(p), cuda::ExpertGemmKernel::kSkinny);
  p.rows = 1;
  EXPECT_EQ(cuda::expert_gemm_kernel_for(p), cuda::ExpertGemmKernel::kSkinny);
  p.rows = 5;
  EXPECT_EQ(cuda::expert_gemm_kernel_for(p), cuda::ExpertGemmKernel::kF16);
  p.rows = 4;
  p.k = 32768;  // a row of x would not fit its shared memory
  EXPECT_EQ(cuda::expert_gemm_kernel_for(p), cuda::ExpertGemmKernel::kF16);
  EXPECT_EQ(cuda::expert_gemm_kernel_for(p, {.kernel = cuda::ExpertGemmKernel::kSkinny}),
            cuda::ExpertGemmKernel::kSkinny);
}

TEST(ExpertGemmChoice, TheSkinnyKernelRefusesRowsOfXThatWouldNotFitItsSharedMemory) {
  // Checked before anything is launched: the pointers are never read.
  const auto fake = [](uintptr_t at) { return reinterpret_cast<const uint8_t*>(at); };
  float* y = reinterpret_cast<float*>(uintptr_t{4096});
  const ExpertGemmParams p{.x = reinterpret_cast<const uint16_t*>(fake(1024)),
                           .row_offsets = reinterpret_cast<const int32_t*>(fake(2048)), .values = fake(256),
                           .scales = fake(512), .global_scales = reinterpret_cast<const float*>(fake(768)), .y = y,
                           .rows = 1, .experts = 4, .n = 64, .k = 32768};
  EXPECT_THROW(cuda::expert_gemm(p, nullptr, {.kernel = cuda::ExpertGemmKernel::kSkinny}), Error);
}

TEST(ExpertGemmChoice, AutoTakesTheFp16KernelUnlessItsScratchIsTooLarge) {
  ExpertGemmParams p{.scales = reinterpret_cast<const uint8_t*>(uintptr_t{256}), .rows = 1024, .experts = 128,
                     .n = 6144, .k = 6144};
  EXPECT_EQ(cuda::expert_gemm_kernel_for(p), cuda::ExpertGemmKernel::kF16);
  p.rows = 32768;  // a prefill chunk of 8,192 tokens, top-4: 400 MB of FP16 activations
  EXPECT_EQ(cuda::expert_gemm_kernel_for(p), cuda::ExpertGemmKernel::kBf16);
  p.rows = 1024;
  p.scales += 2;  // the FP16 kernel copies scales 8 bytes at a time
  EXPECT_EQ(cuda::expert_gemm_kernel_for(p), cuda::ExpertGemmKernel::kBf16);
  EXPECT_EQ(cuda::expert_gemm_kernel_for(p, {.kernel = cuda::ExpertGemmKernel::kF16}), cuda::ExpertGemmKernel::kF16);
}

TEST(ExpertGemmChoice, SharedActivationsFromSixteenRowsAnExpert) {
  using V = cuda::ExpertGemmF16Variant;
  ExpertGemmParams p{.rows = 4 * 64, .experts = 128, .n = 6144, .k = 6144};  // a decode batch of 64, top-4
  EXPECT_EQ(cuda::expert_gemm_f16_variant_for(p), V::kWarpRing);
  p.rows = 4 * 256;  // 256 tokens: 8 rows an expert, where the rotated warp ring measured faster
  EXPECT_EQ(cuda::expert_gemm_f16_variant_for(p), V::kWarpRing);
  p.rows = 16 * 128;  // 16 rows an expert
  EXPECT_EQ(cuda::expert_gemm_f16_variant_for(p), V::kSharedX);
  EXPECT_EQ(cuda::expert_gemm_f16_variant_for(p, {.f16_variant = V::kWarpRing}), V::kWarpRing);
  p.rows = 1;
  EXPECT_EQ(cuda::expert_gemm_f16_variant_for(p, {.f16_variant = V::kSharedX}), V::kSharedX);
}

TEST_F(ExpertGemmKernel, ExactOnSmallIntegers) {
  auto rng = testing::seeded_rng(42);
  run_case({2, 1}, 320, 1152, true, rng);  // every starting step of the warp ring's CTAs
  if (HasFatalFailure()) return;
  run_case({5, 0, 40, 1}, 64, 512, true, rng);
  if (HasFatalFailure()) return;
  run_case({7, 2}, 128, 640, true, rng);
}

}  // namespace
}  // namespace fp4
