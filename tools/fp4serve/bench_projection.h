// The dense-projection benchmark of `fp4serve bench` (section "projections"): CudaBackend's
// linear at MiniMax-M3.1-Flash's attention shapes, with the weight in FP32 (cuBLAS SGEMM,
// pedantic) and with the same values held in BF16 (three BF16 tensor-core products over the
// split activation), side by side, at decode batches and a prefill chunk.
#pragma once

#include <string>
#include <vector>

#include "tools/fp4serve/bench.h"

namespace fp4::bench {

// `bytes` counts the weight once, the activations read and the outputs written. The first
// shape of each kind is checked against the CPU's linear (a miss throws fp4::InternalError).
std::vector<Row> bench_projections(const std::string& device, double copy_gbps, int reps);

}  // namespace fp4::bench
