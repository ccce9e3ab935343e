// The MSA indexer benchmark of `fp4serve bench`: decode steps at the M3.1-Flash indexer
// geometry (4 index heads of 128 values, one shared index-K head, top-16) for batches of 1, 8,
// 32 and 128 sequences at 8K, 32K, 128K and 256K tokens of context, in each serving index page
// format.
#pragma once

#include <string>
#include <vector>

#include "tools/fp4serve/bench.h"

namespace fp4::bench {

// Rows of the indexer table on GPU 0. `bytes` counts the index-K rows every query reads plus
// the queries and the selections; `copy_gbps` is the ceiling measured in the same run. One
// configuration per format is checked against the CPU reference (a mismatch throws
// fp4::InternalError).
std::vector<Row> bench_indexer(const std::string& device, double copy_gbps, const Options& options);

}  // namespace fp4::bench
