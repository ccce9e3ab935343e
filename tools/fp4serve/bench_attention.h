// Sparse decode attention benchmark (CUDA builds only): MiniMax-M3.1-Flash geometry, 64 query
// heads over 4 KV heads of 128 dims, each token attending to its top-16 blocks of a 256K-token
// context, at batch 1, 8, 32 and 128, for every page format. Each configuration is validated once
// against fp4::cpu::paged_attention on the same pages before it is timed.
#pragma once

#include <string>
#include <vector>

#include "tools/fp4serve/bench.h"

namespace fp4::bench {

// Row bytes are the K/V bytes the launch must read: for every (token, KV head, selected block),
// that head's K and V rows (codes and block scales) of the block's visible tokens. `copy_gbps`
// is the device copy bandwidth measured in the same run (the rows' ceiling).
std::vector<Row> bench_paged_attention(const std::string& device, double copy_gbps, int reps);

// The same for one kernel: "auto" (what the engine gets), "tensor-core" (BF16, FP8 and NVFP4
// pages only) or "cuda-core"; the kernel is named in the rows.
std::vector<Row> bench_paged_attention(const std::string& device, double copy_gbps, int reps,
                                       const std::string& kernel);

}  // namespace fp4::bench
