// CudaBackend's own ops against the CPU backend's, on fresh random inputs: the residual add fused
// with RMSNorm, RMSNorm in place, RoPE, row gathers, the cuBLAS FP32 linear, and the memory
// calls. Bounds, derived where they are asserted:
// - the residual add is one float addition on both sides: bit for bit;
// - a norm's squares sum in double on both (exactly, only the order differs), so the row's scale
//   inv = float(1/sqrt(mean + eps)) is the CPU's except when the two double sums straddle a float
//   rounding boundary: then inv is one float ulp off (at most 2^-23 relative), and y = x * inv *
//   w, rounded twice on each side (2^-24 each), is within (2^-23 + 4 * 2^-24) |y| < 2^-21 |y| of
//   the CPU's; with the same inv the operations are the same, so almost every row is
//   bit-identical;
// - RoPE's cos and sin are the device's double sincos rounded to float against glibc's: each
//   within one float ulp, at most 2^-24, so x0 c - x1 s moves by at most (|x0| + |x1|) 2^-24
//   before rounding, and each side rounds three times (two products and the difference, each
//   at most 2^-24 (|x0| + |x1|)): within 7 * 2^-24 (|x0| + |x1|) < 2^-21 (|x0| + |x1|);
// - linear: both sides sum k products in FP32 in different orders; each result is within
//   gamma_k S of the exact sum (S = sum |x w|, gamma_k = k u / (1 - k u), u = 2^-24), so they
//   are within 2 gamma_k S of each other.
// - linear with BF16 weights: x = x_hi + x_mid + x_lo exactly, |x_hi| <= (1 + 2^-8)|x|,
//   |x_mid| <= 2^-8 |x|, |x_lo| <= 2^-16 |x|, so the three partial products' magnitudes sum to at
//   most 1.01 S. Each partial is an FP32 accumulation of exact products on tensor cores, which
//   may truncate rather than round: within gamma'_k of its magnitude with u' = 2^-23. The two
//   additions of the partials add at most 2 u' (1.01 S). Against the CPU's gamma_k S:
//   |gpu - cpu| <= (gamma_k + 1.01 gamma'_{k+2}) S.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/buffer.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dense_ops.h"
#include "backend/cuda/device.h"
#include "formats/minifloat.h"
#include "tests/support/gpu_test.h"
#include "tests/support/linear_bound.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

class CudaBackendOps : public testing::CudaBackendTest {};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST_F(CudaBackendOps, AddRmsNormMatchesCpu) {
  auto rng = testing::seeded_rng(70);
  for (int64_t dim : {8, 64, 255, 6144}) {
    for (bool gemma : {false, true}) {
      for (bool add : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "dim " << dim << (gemma ? " gemma" : "") << (add ? " add" : ""));
        const int64_t rows = 37;
        auto x = testing::random_floats(rows * dim, testing::Distribution::kStudentT3, rng);
        const auto delta = testing::random_floats(rows * dim, testing::Distribution::kGaussian, rng);
        const auto weight = testing::random_floats(dim, testing::Distribution::kGaussian, rng);
        Buffer<float> gx(*gpu_, x), gd(*gpu_, delta), gw(*gpu_, weight), gy(*gpu_, x.size());
        gpu_->add_rms_norm({.x = gx.data(), .delta = add ? gd.data() : nullptr, .weight = gw.data(),
                            .y = gy.data(), .rows = rows, .dim = dim, .eps = 1e-6f, .gemma = gemma});
        std::vector<float> y(x.size());
        cpu::add_rms_norm({.x = x.data(), .delta = add ? delta.data() : nullptr, .weight = weight.data(),
                           .y = y.data(), .rows = rows, .dim = dim, .eps = 1e-6f, .gemma = gemma});
        const auto got_x = gx.download(), got_y = gy.download();
        int64_t identical_rows = 0;
        for (int64_t r = 0; r < rows; ++r) {
          bool identical = true;
          for (int64_t i = r * dim; i < (r + 1) * dim; ++i) {
            ASSERT_TRUE(same_bits(got_x[i], x[i])) << "x + delta at " << i;  // one float add
            identical &= same_bits(got_y[i], y[i]);
            ASSERT_LE(std::abs(double(got_y[i]) - y[i]), 0x1p-21 * std::abs(y[i])) << "y at " << i;
          }
          identical_rows += identical;
        }
        EXPECT_GE(identical_rows, rows - 1) << "rows whose scale rounded differently";
      }
    }
  }
}

TEST_F(CudaBackendOps, RmsNormInPlaceMatchesCpu) {
  auto rng = testing::seeded_rng(71);
  const int64_t rows = 64 * 8, dim = 128;  // per-head norm: rows = tokens x heads
  auto x = testing::random_floats(rows * dim, testing::Distribution::kGaussian, rng);
  const auto weight = testing::random_floats(dim, testing::Distribution::kGaussian, rng);
  Buffer<float> gx(*gpu_, x), gw(*gpu_, weight);
  gpu_->rms_norm({.x = gx.data(), .weight = gw.data(), .y = gx.data(), .rows = rows, .dim = dim, .eps = 1e-5f});
  cpu::rms_norm({.x = x.data(), .weight = weight.data(), .y = x.data(), .rows = rows, .dim = dim, .eps = 1e-5f});
  const auto got = gx.download();
  int64_t differing = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    differing += !same_bits(got[i], x[i]);
    ASSERT_LE(std::abs(double(got[i]) - x[i]), 0x1p-21 * std::abs(x[i])) << i;
  }
  EXPECT_LE(differing, static_cast<int64_t>(x.size() / 100));
}

TEST_F(CudaBackendOps, RopeMatchesCpu) {
  auto rng = testing::seeded_rng(72);
  const int64_t tokens = 300, heads = 5, head_dim = 64;
  for (int64_t rotary : {8, 32, 64}) {
    SCOPED_TRACE(::testing::Message() << "rotary_dim " << rotary);
    auto x = testing::random_floats(tokens * heads * head_dim, testing::Distribution::kGaussian, rng);
    const std::vector<float> before = x;
    std::vector<int32_t> positions(tokens);
    std::uniform_int_distribution<int32_t> pos(0, 300000);
    for (auto& p : positions) p = pos(rng);
    Buffer<float> gx(*gpu_, x);
    Buffer<int32_t> gp(*gpu_, positions);
    const RopeParams p{.x = gx.data(), .positions = gp.data(), .tokens = tokens, .heads = heads,
                       .head_dim = head_dim, .rotary_dim = rotary, .theta = 5e6};
    gpu_->rope(p);
    RopeParams c = p;
    c.x = x.data();
    c.positions = positions.data();
    cpu::rope(c);
    const auto got = gx.download();
    int64_t differing = 0;
    const int64_t half = rotary / 2;
    for (int64_t v = 0; v < tokens * heads; ++v) {
      for (int64_t j = 0; j < head_dim; ++j) {
        const int64_t i = v * head_dim + j;
        if (j >= rotary) {
          ASSERT_TRUE(same_bits(got[i], before[i])) << "unrotated dim " << j << " changed";
          continue;
        }
        const int64_t partner = j < half ? i + half : i - half;
        const double bound = (std::abs(before[i]) + std::abs(before[partner])) * 0x1p-21;
        differing += !same_bits(got[i], x[i]);
        ASSERT_LE(std::abs(double(got[i]) - x[i]), bound) << "vector " << v << " dim " << j;
      }
    }
    EXPECT_LE(differing, tokens * heads * rotary / 100);
  }
}

TEST_F(CudaBackendOps, GatherRowsCopiesAndPoisonsBadIds) {
  auto rng = testing::seeded_rng(73);
  const int64_t table_rows = 311, dim = 96;
  const auto table = testing::random_floats(table_rows * dim, testing::Distribution::kGaussian, rng);
  std::vector<int32_t> ids = {0, 310, 5, 5, 17, -1, 311, 200};
  Buffer<float> gt(*gpu_, table), out(*gpu_, ids.size() * dim);
  Buffer<int32_t> gi(*gpu_, ids);
  gpu_->gather_rows({.table = gt.data(), .table_rows = table_rows, .dim = dim, .ids = gi.data(),
                     .count = static_cast<int64_t>(ids.size()), .out = out.data()});
  const auto got = out.download();
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int64_t i = 0; i < dim; ++i) {
      const float g = got[r * dim + i];
      if (ids[r] < 0 || ids[r] >= table_rows) {
        ASSERT_TRUE(std::isnan(g)) << "row " << r << " (id " << ids[r] << ") must be NaN";
      } else {
        ASSERT_TRUE(same_bits(g, table[ids[r] * dim + i])) << "row " << r;
      }
    }
  }
}

TEST_F(CudaBackendOps, LinearWithinTheSummationBound) {
  auto rng = testing::seeded_rng(74);
  struct Shape { int64_t m, n, k; };
  for (Shape s : {Shape{1, 311, 256}, Shape{7, 64, 8}, Shape{130, 257, 1000}, Shape{33, 6144, 64}}) {
    SCOPED_TRACE(::testing::Message() << s.m << " x " << s.n << " x " << s.k);
    const auto x = testing::random_floats(s.m * s.k, testing::Distribution::kStudentT3, rng);
    const auto w = testing::random_floats(s.n * s.k, testing::Distribution::kGaussian, rng);
    Buffer<float> gx(*gpu_, x), gw(*gpu_, w), gy(*gpu_, s.m * s.n);
    gpu_->linear({.x = gx.data(), .w = gw.data(), .y = gy.data(), .m = s.m, .n = s.n, .k = s.k});
    std::vector<float> y(s.m * s.n);
    cpu::linear({.x = x.data(), .w = w.data(), .y = y.data(), .m = s.m, .n = s.n, .k = s.k});
    const auto got = gy.download();
    const double u = 0x1p-24, gamma = s.k * u / (1 - s.k * u);
    ASSERT_GE(testing::check_linear_within(x, w, got, y, s.m, s.n, s.k, 2 * gamma), 0);
  }
}

std::vector<uint16_t> to_bf16(std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = bf16_encode(values[i]);
    values[i] = bf16_decode(bits[i]);  // the FP32 weight the CPU reads: the same numbers
  }
  return bits;
}

TEST_F(CudaBackendOps, LinearWithBf16WeightsWithinTheSummationBound) {
  auto rng = testing::seeded_rng(76);
  struct Shape { int64_t m, n, k; };
  // Up to 4 rows (8 on small weights) with k a multiple of 8 take the skinny FP32 kernel (a
  // tighter bound, checked in skinny_linear_test.cpp); the rest, k = 1001 at m = 2 and m = 9
  // among them, the three products.
  for (Shape s : {Shape{1, 311, 256}, Shape{3, 64, 8}, Shape{130, 257, 1000}, Shape{33, 6144, 64},
                  Shape{1, 4096, 6144}, Shape{2, 50, 1001}, Shape{8, 77, 4096}, Shape{9, 33, 512}}) {
    SCOPED_TRACE(::testing::Message() << s.m << " x " << s.n << " x " << s.k);
    const auto x = testing::random_floats(s.m * s.k, testing::Distribution::kStudentT3, rng);
    auto w = testing::random_floats(s.n * s.k, testing::Distribution::kGaussian, rng);
    const std::vector<uint16_t> bits = to_bf16(w);
    Buffer<float> gx(*gpu_, x), gy(*gpu_, s.m * s.n);
    Buffer<uint16_t> gw(*gpu_, bits);
    gpu_->linear({.x = gx.data(), .w = nullptr, .y = gy.data(), .m = s.m, .n = s.n, .k = s.k,
                  .w_bf16 = gw.data()});
    std::vector<float> y(s.m * s.n);
    cpu::linear({.x = x.data(), .w = w.data(), .y = y.data(), .m = s.m, .n = s.n, .k = s.k});
    const auto got = gy.download();
    const double u = 0x1p-24, gamma = s.k * u / (1 - s.k * u);
    const double u_tc = 0x1p-23, gamma_tc = (s.k + 2) * u_tc / (1 - (s.k + 2) * u_tc);
    const int64_t exact = testing::check_linear_within(x, w, got, y, s.m, s.n, s.k, gamma + 1.01 * gamma_tc);
    ASSERT_GE(exact, 0);
    // Not a bound, a sign the split is not dropping bits: a lost x_lo alone would leave errors
    // near 2^-16 S, far above these.
    std::printf("[  CHECKED ] %lld of %lld outputs equal the CPU's\n", static_cast<long long>(exact),
                static_cast<long long>(s.m * s.n));
  }
}

// The split behind the BF16-weight linear, on its own: x = hi + mid + lo exactly for every
// finite x from 2^-100 up to the largest float that rounds to a finite BF16, across all
// exponents and signs; beyond (and for +-inf), hi alone carries x and mid = lo = 0. A lost lo
// (errors near 2^-16 |x|) would hide under the GEMM test's bound for long k; not here.
TEST_F(CudaBackendOps, Bf16SplitIsExact) {
  auto rng = testing::seeded_rng(78);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  std::vector<float> x;
  for (int e = -100; e <= 127; ++e) {
    for (int i = 0; i < 64; ++i) {
      const uint32_t sign = (i & 1) ? 0x80000000u : 0u;
      x.push_back(std::bit_cast<float>(sign | (static_cast<uint32_t>(e + 127) << 23) | mantissa(rng)));
    }
  }
  const float max_finite_bf16 = std::bit_cast<float>(0x7F7FFFFFu & 0xFFFF0000u);
  // Halfway between BF16's largest, 0x1.FEp127, and 2^128: from here up round to nearest is inf.
  const float rounds_to_inf = std::bit_cast<float>(0x7F7F8000u);  // 0x1.FFp127
  for (float v : {max_finite_bf16, -max_finite_bf16, std::nextafter(rounds_to_inf, 0.0f), rounds_to_inf,
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    x.push_back(v);
  }
  const int64_t n = std::ssize(x);
  Buffer<float> gx(*gpu_, x);
  Buffer<uint16_t> pieces(*gpu_, static_cast<size_t>(3 * n));
  FP4_CUDA_CHECK(cuda::detail::launch_split_bf16x3(gx.data(), n, pieces.data(), gpu_->stream()));
  const auto got = pieces.download();
  for (int64_t i = 0; i < n; ++i) {
    const double hi = bf16_decode(got[i]), mid = bf16_decode(got[n + i]), lo = bf16_decode(got[2 * n + i]);
    if (std::isfinite(hi)) {
      ASSERT_EQ(hi + mid + lo, double(x[i])) << "x = " << x[i] << " (" << std::hexfloat << x[i] << ")";
    } else {
      ASSERT_GE(std::abs(double(x[i])), double(rounds_to_inf)) << std::hexfloat << x[i];
      ASSERT_EQ(hi, x[i] > 0 ? INFINITY : -INFINITY) << std::hexfloat << x[i];
      ASSERT_EQ(mid, 0.0);
      ASSERT_EQ(lo, 0.0);
    }
  }
}

TEST_F(CudaBackendOps, GatherRowsFromABf16Table) {
  auto rng = testing::seeded_rng(77);
  const int64_t rows = 50, dim = 300, count = 70;
  auto table = testing::random_floats(rows * dim, testing::Distribution::kGaussian, rng);
  const std::vector<uint16_t> bits = to_bf16(table);
  std::vector<int32_t> ids(count);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % rows);
  Buffer<uint16_t> gt(*gpu_, bits);
  Buffer<int32_t> gi(*gpu_, ids);
  Buffer<float> out(*gpu_, count * dim);
  gpu_->gather_rows({.table = nullptr, .table_rows = rows, .dim = dim, .ids = gi.data(), .count = count,
                     .out = out.data(), .table_bf16 = gt.data()});
  const auto got = out.download();
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t i = 0; i < dim; ++i) ASSERT_TRUE(same_bits(got[r * dim + i], table[ids[r] * dim + i])) << r;
  }
}

TEST_F(CudaBackendOps, MemoryRoundTripsAndZeroFills) {
  auto rng = testing::seeded_rng(75);
  const auto host = testing::random_floats(1000, testing::Distribution::kGaussian, rng);
  Buffer<float> b(*gpu_, host);
  EXPECT_EQ(b.download(), host);
  b.zero();
  EXPECT_EQ(b.download(), std::vector<float>(host.size(), 0.0f));
  const Backend::MemoryStats m = gpu_->device_memory();
  EXPECT_GT(m.total_bytes, 0);
  EXPECT_GT(m.free_bytes, 0);
  EXPECT_LE(m.free_bytes, m.total_bytes);
  EXPECT_FALSE(gpu_->uses_host_memory());
}

// While a step is recorded its buffers come from the recording arena: the graph holds no memory
// node, a buffer released during the recording is the next one of its size, and each recording
// starts over in the same memory; a buffer that outlives its recording is refused at the next
// one. From the stream-ordered pool (kept for comparisons) the graph holds memory nodes, which
// the census must see, or its zero above proves nothing. Each graph reverses a table's rows
// twice through its own buffers, so a replay that read freed or foreign memory shows in `out`.
TEST_F(CudaBackendOps, RecordingsTakeTheirBuffersFromTheArena) {
  auto rng = testing::seeded_rng(76);
  const int64_t rows = 5, dim = 96;
  const auto host = testing::random_floats(rows * dim, testing::Distribution::kGaussian, rng);
  const Buffer<float> table(*gpu_, host);
  Buffer<float> out(*gpu_, static_cast<size_t>(rows * dim));
  const Buffer<int32_t> reverse(*gpu_, std::vector<int32_t>{4, 3, 2, 1, 0});
  auto gather = [&](const float* from, float* to) {
    gpu_->gather_rows({.table = from, .table_rows = rows, .dim = dim, .ids = reverse.data(), .count = rows, .out = to});
  };
  auto replay_and_check = [&](CapturedOps& ops) {
    out.zero();
    ops.replay();
    EXPECT_EQ(out.download(), host);
  };
  std::vector<const void*> firsts;
  for (int recording = 0; recording < 2; ++recording) {
    gpu_->begin_capture();
    {
      Buffer<float> reversed(*gpu_, static_cast<size_t>(rows * dim));
      firsts.push_back(reversed.data());
      const void* released = nullptr;
      {
        const Buffer<float> scratch(*gpu_, static_cast<size_t>(rows * dim));
        released = scratch.data();
      }
      const Buffer<float> again(*gpu_, static_cast<size_t>(rows * dim));
      EXPECT_EQ(again.data(), released) << "a released buffer is the next one of its size";
      gather(table.data(), reversed.data());
      gather(reversed.data(), out.data());
    }
    const std::unique_ptr<CapturedOps> ops = gpu_->end_capture();
    const cuda::GraphCensus graph = gpu_->last_recording();
    EXPECT_EQ(graph.kernels, 2);
    EXPECT_EQ(graph.memory_nodes, 0);
    replay_and_check(*ops);
  }
  EXPECT_EQ(firsts[0], firsts[1]) << "each recording starts over in the arena's memory";
  EXPECT_GT(gpu_->recording_arena_bytes(), 0);

  gpu_->begin_capture();
  Buffer<float> kept(*gpu_, static_cast<size_t>(rows * dim));
  gather(table.data(), kept.data());
  gather(kept.data(), out.data());
  const std::unique_ptr<CapturedOps> kept_ops = gpu_->end_capture();
  EXPECT_THROW(gpu_->begin_capture(), Error);
  replay_and_check(*kept_ops);
  kept = Buffer<float>();

  gpu_->set_recording_memory(cuda::CudaBackend::RecordingMemory::kStreamOrderedPool);
  gpu_->begin_capture();
  {
    Buffer<float> reversed(*gpu_, static_cast<size_t>(rows * dim));
    gather(table.data(), reversed.data());
    gather(reversed.data(), out.data());
  }
  const std::unique_ptr<CapturedOps> pool_ops = gpu_->end_capture();
  EXPECT_EQ(gpu_->last_recording().kernels, 2);
  EXPECT_GE(gpu_->last_recording().memory_nodes, 2) << "an allocation and its free";
  replay_and_check(*pool_ops);
}

}  // namespace
}  // namespace fp4
