#include "tools/fp4serve/bench.h"

namespace fp4::bench {

std::vector<Row> run_gpu_benchmarks(const Options&, std::string& why) {
  why = "this build has no CUDA backend (nvcc was not found at configure time)";
  return {};
}

}  // namespace fp4::bench
