// The decode-step benchmark of `fp4serve bench` (section "model"): the engine's forward pass on
// the GPU for a model with MiniMax-M3.1-Flash's width, per layer, at decode batches {1, 16, 64}
// x contexts {8K, 64K, 256K}, with NVFP4, FP8 and BF16 KV and index caches, from recorded CUDA
// graphs as the engine runs decode steps, and op by op (--enforce-eager) on NVFP4 caches.
#pragma once

#include <string>
#include <vector>

#include "tools/fp4serve/bench.h"

namespace fp4::bench {

std::vector<Row> bench_model_decode(const std::string& device, double copy_gbps, const Options& options);

}  // namespace fp4::bench
