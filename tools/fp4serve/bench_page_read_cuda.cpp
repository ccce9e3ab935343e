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

const char* name_of(detail::PageRead how) { return how == detail::PageRead::kLoads ? "loads" : "bulk copies"; }

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

// The kernel (on its grid of `warps`) against the host on a pool of random bytes and a shuffled
// table, with a few more than two pages a warp (so that every warp walks on to further pages, and some to a third).
void check_page_read(detail::PageRead how, int64_t warps, int64_t page_bytes, std::mt19937_64& rng) {
  const int64_t checked_pages = 2 * warps + 3;
  std::vector<uint8_t> pool(static_cast<size_t>(checked_pages * page_bytes));
  for (size_t i = 0; i < pool.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(pool.data() + i, &r, 8);  // page sizes are multiples of 8
  }
  std::vector<int32_t> table(checked_pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  const cuda::DeviceBuffer d_pool = cuda::DeviceBuffer::copy_of(pool), d_table = cuda::DeviceBuffer::copy_of(table);
  cuda::DeviceBuffer d_out(static_cast<size_t>(warps) * 4);
  d_out.fill(0xA5);
  FP4_CUDA_CHECK(detail::launch_page_read(how, d_pool.as<uint8_t>(), page_bytes, d_table.as<int32_t>(), checked_pages,
                                          d_out.as<uint32_t>(), warps, nullptr));
  std::vector<uint32_t> got(static_cast<size_t>(warps));
  d_out.download(got.data(), got.size() * 4);
  for (int64_t w = 0; w < warps; ++w) {
    uint32_t want = 0;
    for (int64_t i = w; i < checked_pages; i += warps) want ^= page_xor(pool.data() + table[i] * page_bytes, page_bytes);
    if (got[w] != want)
      fail_internal("page read ({}) of {}-byte pages: warp {} XORed {:#x}, the host {:#x}", name_of(how), page_bytes, w,
                    got[w], want);
  }
}

}  // namespace

std::vector<Row> bench_page_read(const std::string& device, double copy_gbps, int reps) {
  std::vector<Row> rows;
  std::mt19937_64 rng(0x9A6E);
  constexpr detail::PageRead kHows[] = {detail::PageRead::kLoads, detail::PageRead::kBulk};
  int64_t warps[2] = {};
  for (int i = 0; i < 2; ++i) FP4_CUDA_CHECK(detail::page_read_warps(kHows[i], &warps[i]));
  cuda::DeviceBuffer d_out(static_cast<size_t>(std::max(warps[0], warps[1])) * 4);
  for (PageDType dtype : {PageDType::kNVFP4, PageDType::kFP8, PageDType::kBF16}) {
    const int64_t page_bytes = kvcache::index_page_layout(dtype, kDim).page_bytes;
    for (int i = 0; i < 2; ++i) check_page_read(kHows[i], warps[i], page_bytes, rng);
    cuda::DeviceBuffer pool(static_cast<size_t>(kPages * page_bytes));
    pool.fill(0x3C);  // the values do not matter to the time
    for (const bool shuffled : {true, false}) {
      std::vector<int32_t> table(kPages);
      std::iota(table.begin(), table.end(), 0);
      if (shuffled) std::shuffle(table.begin(), table.end(), rng);
      const cuda::DeviceBuffer d_table = cuda::DeviceBuffer::copy_of(table);
      for (int i = 0; i < 2; ++i) {
        const detail::PageRead how = kHows[i];
        auto run = [&](cudaStream_t s) {
          FP4_CUDA_CHECK(detail::launch_page_read(how, pool.as<uint8_t>(), page_bytes, d_table.as<int32_t>(), kPages,
                                                  d_out.as<uint32_t>(), warps[i], s));
        };
        const double ms = cuda::median_ms(run, 3, reps);
        rows.push_back({device,
                        fmt::format("page read {} index pages, {}, {}", kvcache::page_dtype_name(dtype),
                                    shuffled ? "shuffled" : "in order", name_of(how)),
                        fmt::format("{} pages of {} B", kPages, page_bytes), double(kPages * page_bytes), ms, copy_gbps,
                        true});
      }
    }
  }
  return rows;
}

}  // namespace fp4::bench
