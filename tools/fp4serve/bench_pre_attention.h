// The fused pre-attention benchmark of `fp4serve bench`: one M3.1-Flash sparse layer's step
// (64 q / 4 KV heads of 128, 4 index-q heads and one index-K head, partial RoPE 64, Gemma
// norms) for decode batches of 1, 8, 32 and 128 tokens and a prefill chunk of 8,192, with both
// caches in each serving page format.
#pragma once

#include <string>
#include <vector>

#include "tools/fp4serve/bench.h"

namespace fp4::bench {

// Rows of the pre-attention table on GPU 0. `bytes` counts the projections read, q and index_q
// written and the cache rows written. The decode batch of 8 is checked against the CPU
// reference (q and index_q within the kernel test's bound; a mismatch throws
// fp4::InternalError).
std::vector<Row> bench_pre_attention(const std::string& device, double copy_gbps, int reps);

}  // namespace fp4::bench
