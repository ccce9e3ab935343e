// The sampling op on the GPU: SampleParams' contract (backend/sample_params.h), with the host
// sampler fp4::sampling::sample() (src/sampling/sampler.h) as the reference. Tokens are the
// host's bit for bit; logprobs are within a derived bound of the host's (the host sums the
// softmax denominator sequentially, the GPU in parallel), and ranks and top-logprob ids are the
// host's wherever the logprobs are: where a logprob lands on the other side of a float rounding
// boundary, ties among logprobs, and so ranks and the top order, can differ.
// docs/kernels/sampler.md has the design and the numerics.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/sample_params.h"

namespace fp4::cuda {

// Pointers are device pointers; asynchronous on `stream`. One block per row, no allocation and
// no host synchronisation, so a launch can be captured in a CUDA graph; the grid depends on
// p.rows alone. Nothing is launched when p.rows is 0.
void sample(const SampleParams& p, cudaStream_t stream);

namespace detail {

cudaError_t launch_sample(const SampleParams& p, cudaStream_t stream);

}  // namespace detail
}  // namespace fp4::cuda
