// The page-read ceiling of `fp4serve bench`: how fast the GPU reads whole index-cache pages in
// the order a block table gives, with no work on the bytes, for each index page format. The
// indexer's decode reads exactly these bytes in this order (each page once, the block table
// shuffled), so this is the bandwidth it could reach if its arithmetic cost nothing: a ceiling
// of the access pattern beside the copy's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tools/fp4serve/bench.h"

namespace fp4::bench {

// Rows for pages of the NVFP4, FP8 and BF16 index layouts (head_dim 128, 128 tokens), as many
// as 128 sequences of 256K tokens hold, in shuffled and in sequential order, by loads and by
// bulk copies. Each kernel is first checked against the host's XOR of a pool of random pages, a
// little over two a warp (a mismatch throws fp4::InternalError).
std::vector<Row> bench_page_read(const std::string& device, double copy_gbps, int reps);

namespace detail {

// How a warp reads its pages: 16-byte loads into registers, or bulk copies (the copy engine of
// each SM, cp.async.bulk) of up to 4 KB into a shared-memory ring, 4 pieces in flight a warp.
enum class PageRead { kLoads, kBulk };

// The kernel's warps on the current device (W, one wave): asked once, passed to every launch;
// `out` below holds one word per warp.
cudaError_t page_read_warps(PageRead how, int64_t* warps);

// out[w] = XOR of every 32-bit word of the pages warp w read: pages table[w], table[w + W], ...
// page_bytes is one of the index layouts' (9,216, 16,384 or 32,768).
cudaError_t launch_page_read(PageRead how, const uint8_t* pool, int64_t page_bytes, const int32_t* table,
                             int64_t pages, uint32_t* out, int64_t warps, cudaStream_t stream);

}  // namespace detail
}  // namespace fp4::bench
