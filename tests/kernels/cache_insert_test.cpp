// The CUDA cache writer must leave exactly the bytes fp4::cpu::cache_insert (kvcache's
// write_token / write_index_token) leaves: every page format, main K/V and index layouts,
// per-head and flattened groups, random slots in shuffled pages, inputs with NaN, inf, -0,
// huge and tiny values. The whole pool is compared, pre-filled with a fresh random pattern each
// run, so a byte written where it should not be, or not written, shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cache_insert.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "tests/support/expect_error.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

using kvcache::PageDType;
using kvcache::PageLayout;

struct Shape {
  bool index;  // key-only index page (heads must be 1)
  int heads, head_dim;
};

std::string describe(PageDType dtype, const Shape& s, int64_t tokens) {
  return std::string(kvcache::page_dtype_name(dtype)) + (s.index ? " index " : " K/V ") + std::to_string(s.heads) +
         "x" + std::to_string(s.head_dim) + ", " + std::to_string(tokens) + " tokens";
}

std::vector<float> make_input(size_t n, std::mt19937_64& rng) {
  auto v = testing::random_floats(n, testing::Distribution::kBlockScaled, rng);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            3e38f, -1e30f, 1e-30f, -0.0f, 1e-40f};
  for (float s : specials) v[pick(rng)] = s;
  return v;
}

std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> b(n);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& x : b) x = static_cast<uint8_t>(byte(rng));
  return b;
}

// Writes `tokens` tokens into distinct random slots of a shuffled pool on both sides and
// compares the pools. `skipped` extra tokens carry slots outside the pool: the GPU must ignore
// them (the CPU reference, which would throw, does not see them). `misaligned` offsets the
// device inputs by one float, off the 16-byte vector path.
void run_case(PageDType dtype, const Shape& shape, int64_t tokens, int skipped, bool misaligned,
              std::mt19937_64& rng) {
  SCOPED_TRACE(describe(dtype, shape, tokens) + (misaligned ? ", misaligned input" : ""));
  const PageLayout layout = shape.index ? kvcache::index_page_layout(dtype, shape.head_dim)
                                        : kvcache::kv_page_layout(dtype, shape.heads, shape.head_dim);
  const int64_t page_tokens = layout.page_tokens;
  const int64_t num_pages = (tokens + page_tokens - 1) / page_tokens + 3;
  std::vector<int64_t> slots(num_pages * page_tokens);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(tokens);

  kvcache::KvScales scales;
  std::uniform_real_distribution<float> log2_scale(-8.0f, 4.0f);
  if (dtype == PageDType::kFP8 || (dtype == PageDType::kNVFP4 && !shape.index)) {
    scales = {std::exp2(log2_scale(rng)), std::exp2(log2_scale(rng))};
  }
  const int64_t vec = layout.vector_elems();
  const auto k = make_input(tokens * vec, rng);
  const auto v = make_input(tokens * vec, rng);
  std::vector<uint8_t> want = random_bytes(num_pages * layout.page_bytes, rng);
  const std::vector<uint8_t> before = want;
  cpu::cache_insert({.layout = &layout, .pool = want.data(), .num_pages = num_pages, .k = k.data(),
                     .v = shape.index ? nullptr : v.data(), .slots = slots.data(), .tokens = tokens, .scales = scales});

  // The device step: the same tokens, then the skipped ones, in a shuffled order.
  std::vector<int64_t> order(tokens + skipped);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const int64_t all = tokens + skipped;
  const int64_t offset = misaligned ? 1 : 0;
  std::vector<float> dk((all * vec) + offset), dv((all * vec) + offset);
  std::vector<int64_t> dslots(all);
  for (int64_t i = 0; i < all; ++i) {
    const int64_t src = order[i];
    dslots[i] = src < tokens ? slots[src] : (src % 2 ? -1 : num_pages * page_tokens + src);
    if (src < tokens) {
      std::copy_n(&k[src * vec], vec, &dk[offset + i * vec]);
      std::copy_n(&v[src * vec], vec, &dv[offset + i * vec]);
    }
  }
  cuda::DeviceBuffer d_pool(before.size()), d_k(dk.size() * 4), d_v(dv.size() * 4), d_slots(dslots.size() * 8);
  d_pool.upload(before.data(), before.size());
  d_k.upload(dk.data(), dk.size() * 4);
  d_v.upload(dv.data(), dv.size() * 4);
  d_slots.upload(dslots.data(), dslots.size() * 8);
  cuda::cache_insert({.layout = &layout, .pool = d_pool.as<uint8_t>(), .num_pages = num_pages,
                      .k = d_k.as<float>() + offset, .v = shape.index ? nullptr : d_v.as<float>() + offset,
                      .slots = d_slots.as<int64_t>(), .tokens = all, .scales = scales},
                     nullptr);
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> got(before.size());
  d_pool.download(got.data(), got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t page = static_cast<int64_t>(i) / layout.page_bytes;
    ASSERT_EQ(got[i], want[i]) << "page " << page << " byte " << i % layout.page_bytes
                               << (got[i] == before[i] ? " (not written)" : "");
  }
}

class CacheInsertKernel : public testing::GpuTest {};

const Shape kShapes[] = {
    {false, 4, 128},  // M3 main K/V
    {false, 2, 64},
    {false, 1, 16},
    {false, 4, 8},    // tiny heads: one flattened group of 32 values
    {false, 3, 8},    // a flattened group of 24 values: not whole blocks (not NVFP4)
    {true, 1, 128},   // M3 index K
    {true, 1, 16},
};

TEST_F(CacheInsertKernel, ByteExactAgainstCpuInEveryLayout) {
  auto rng = testing::seeded_rng(21);
  for (PageDType dtype : {PageDType::kFP32, PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4}) {
    for (const Shape& shape : kShapes) {
      if (dtype == PageDType::kNVFP4 && (shape.heads * shape.head_dim) % kNvfp4BlockElems != 0) continue;
      for (int64_t tokens : {1, 37, 300}) {
        run_case(dtype, shape, tokens, 0, false, rng);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_F(CacheInsertKernel, SkipsSlotsOutsideThePoolAndTakesMisalignedInput) {
  auto rng = testing::seeded_rng(22);
  for (PageDType dtype : {PageDType::kFP32, PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4}) {
    for (const Shape& shape : {Shape{false, 4, 128}, Shape{true, 1, 128}, Shape{false, 3, 8}}) {
      if (dtype == PageDType::kNVFP4 && (shape.heads * shape.head_dim) % kNvfp4BlockElems != 0) continue;
      run_case(dtype, shape, 129, 7, true, rng);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(CacheInsertKernelParams, RejectsWhatTheReferenceRejects) {
  const auto index = kvcache::index_page_layout(PageDType::kNVFP4, 128);
  const auto kv = kvcache::kv_page_layout(PageDType::kFP8, 4, 128);
  const auto nvfp4_24 = kvcache::make_page_layout(PageDType::kNVFP4, 3, 8, true);
  alignas(16) static uint8_t pool[16];
  const float x[1] = {0.0f};
  const int64_t slots[1] = {0};
  const CacheInsertParams ok{.layout = &index, .pool = pool, .num_pages = 1, .k = x, .v = nullptr,
                             .slots = slots, .tokens = 1, .scales = {}};
  auto with = [&](auto change) { CacheInsertParams p = ok; change(p); return p; };
  testing::expect_error([&] { cuda::cache_insert(with([](auto& p) { p.scales.k = 2.0f; }), nullptr); },
                        {"NVFP4 index-K", "global scale"});
  testing::expect_error([&] { cuda::cache_insert(with([&](auto& p) { p.layout = &kv; }), nullptr); },
                        {"V given", "missing"});
  testing::expect_error([&] { cuda::cache_insert(with([&](auto& p) { p.layout = &kv; p.v = x; p.scales.v = -1.0f; }), nullptr); },
                        {"fp8 V scale", "-1"});
  testing::expect_error([&] { cuda::cache_insert(with([&](auto& p) { p.layout = &nvfp4_24; p.v = x; }), nullptr); },
                        {"24 values", "16-value blocks"});
}

}  // namespace
}  // namespace fp4
