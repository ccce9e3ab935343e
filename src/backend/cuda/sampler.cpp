#include "backend/cuda/sampler.h"

#include "backend/cuda/cuda_check.h"

namespace fp4::cuda {

void sample(const SampleParams& p, cudaStream_t stream) {
  check_sample_params(p);
  if (p.rows == 0) return;
  FP4_CUDA_CHECK(detail::launch_sample(p, stream));
}

}  // namespace fp4::cuda
