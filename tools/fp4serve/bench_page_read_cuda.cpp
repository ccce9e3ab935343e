// Rows of the page-read ceiling (bench_page_read.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "core/check.h"
#include "kvcache/page_layout.h"
#include "tools/fp4serve/bench_page_read.h"

namespace fp4::bench {
namespace {

using kvcache::PageDType;

constexpr int64_t kDim = 128;                     // the index-K head of M3.1-Flash
constexpr int64_t kPages = 128 * 256 * 1024 / 128;  // 128 sequences of 256K tokens: the indexer's largest step
constexpr int64_t kCheckedPages = 64;

// XOR of every 32-bit word of a page.
uint32_t page_xor(const uint8_t* page, int64_t bytes) {
  uint32_t r = 0;
  for (int64_t i = 0; i < bytes; i += 4) {
    uint32_t w;
    std::memcpy(&w, page + i, 4);
    r ^= w;
  }
  return r;
}

// The kernel against the host on a small pool of random bytes and a shuffled table.
void check_page_read(int64_t page_bytes, std::mt19937_64& rng) {
  std::vector<uint8_t> pool(static_cast<size_t>(kCheckedPages * page_bytes));
  for (auto& b : pool) b = static_cast<uint8_t>(rng());
  std::vector<int32_t> table(kCheckedPages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  int64_t warps = 0;
  FP4_CUDA_CHECK(detail::page_read_warps(&warps));
  const cuda::DeviceBuffer d_pool = cuda::DeviceBuffer::copy_of(pool), d_table = cuda::DeviceBuffer::copy_of(table);
  cuda::DeviceBuffer d_out(static_cast<size_t>(warps) * 4);
  d_out.fill(0xA5);
  FP4_CUDA_CHECK(detail::launch_page_read(d_pool.as<uint8_t>(), page_bytes, d_table.as<int32_t>(), kCheckedPages,
                                          d_out.as<uint32_t>(), nullptr));
  std::vector<uint32_t> got(static_cast<size_t>(warps));
  d_out.download(got.data(), got.size() * 4);
  for (int64_t w = 0; w < warps; ++w) {
    uint32_t want = 0;
    for (int64_t i = w; i < kCheckedPages; i += warps) want ^= page_xor(pool.data() + table[i] * page_bytes, page_bytes);
    if (got[w] != want)
      fail_internal("page read of {}-byte pages: warp {} XORed {:#x}, the host {:#x}", page_bytes, w, got[w], want);
  }
}

}  // namespace

std::vector<Row> bench_page_read(const std::string& device, double copy_gbps, int reps) {
  std::vector<Row> rows;
  std::mt19937_64 rng(0x9A6E);
  int64_t warps = 0;
  FP4_CUDA_CHECK(detail::page_read_warps(&warps));
  cuda::DeviceBuffer d_out(static_cast<size_t>(warps) * 4);
  for (PageDType dtype : {PageDType::kNVFP4, PageDType::kFP8, PageDType::kBF16}) {
    const int64_t page_bytes = kvcache::index_page_layout(dtype, kDim).page_bytes;
    check_page_read(page_bytes, rng);
    cuda::DeviceBuffer pool(static_cast<size_t>(kPages * page_bytes));
    pool.fill(0x3C);  // the values do not matter to the time
    for (const bool shuffled : {true, false}) {
      std::vector<int32_t> table(kPages);
      std::iota(table.begin(), table.end(), 0);
      if (shuffled) std::shuffle(table.begin(), table.end(), rng);
      const cuda::DeviceBuffer d_table = cuda::DeviceBuffer::copy_of(table);
      auto run = [&](cudaStream_t s) {
        FP4_CUDA_CHECK(detail::launch_page_read(pool.as<uint8_t>(), page_bytes, d_table.as<int32_t>(), kPages,
                                                d_out.as<uint32_t>(), s));
      };
      const double ms = cuda::median_ms(run, 3, reps);
      rows.push_back({device,
                      fmt::format("page read {} index pages, {}", kvcache::page_dtype_name(dtype),
                                  shuffled ? "shuffled" : "in order"),
                      fmt::format("{} pages of {} B", kPages, page_bytes), double(kPages * page_bytes), ms, copy_gbps,
                      true});
    }
  }
  return rows;
}

}  // namespace fp4::bench
