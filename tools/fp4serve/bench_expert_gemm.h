// The NVFP4 expert-matmul benchmark of `fp4serve bench`: the routed experts of one
// MiniMax-M3 MoE layer (hidden 6144, intermediate 3072, 128 experts, top-4) at decode batches of
// 1, 16, 64 and 256 tokens, each token routed to 4 distinct random experts.
#pragma once

#include <string>
#include <vector>

#include "tools/fp4serve/bench.h"

namespace fp4::bench {

// Rows of the expert table on GPU 0, one per matmul (gate and up fused: [6144, 6144]; down:
// [6144, 3072]) and batch. `bytes` counts the active experts' weights (codes and block scales)
// plus the activations read and the outputs written. One launch per matmul is checked against
// the CPU reference (a mismatch throws fp4::InternalError).
std::vector<Row> bench_expert_gemm(const std::string& device, double copy_gbps, const Options& options);

}  // namespace fp4::bench
